"""The fleet simulator (``accel-autoscaler simulate``): the production evaluation
cycle (``engine/cycle.py``), engine, rules, executor and actions against an
in-memory cluster in simulated time, and the same fleet without them, to measure
what the rules are worth.

- ``scenario``: the scenario YAML and its validation (``scenario_workload``: its
  workload section, gangs and checkpoints included);
- ``kube``: the in-memory Kubernetes API (the ``Kube`` protocol);
- ``fleet``: the simulated cluster, composed of ``clock`` (simulated time),
  ``machines`` (nodes, devices, the MachineSet controller), ``jobs`` (the Job
  controller and the scheduler's pass), ``gangs`` (multi-node gang jobs under a
  JobSet or PyTorchJob, and those operators), ``jobstate`` (the job and gang
  records they share), ``faults`` and ``accounting``;
- ``scheduler``: the placement hook and ``first-fit``; ``placement``: the placement
  scorer as a scheduler; ``schedulers``: the registry a scenario names one from;
- ``telemetry``: the series a scrape would see, into the evaluator's store;
- ``run``: the two runs through the production evaluation cycle;
- ``results``: ``summary.json`` and the table; ``plots``: the PNGs.

The command itself (flags, files) is ``autoscaler/commands/simulate.py``.
"""
