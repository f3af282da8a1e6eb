"""``python -m exporter.backends.oneapi``: the Intel SYCL devices dpctl sees, as one
JSON line. The backend's discovery runs it as a child process (so dpctl and the SYCL
runtimes never load into the exporter), and it doubles as an operator's "what does
SYCL see here?"."""

import sys

from exporter.backends.oneapi.sycl import main

if __name__ == "__main__":
    sys.exit(main())
