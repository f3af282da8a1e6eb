"""The operations that actions are made of: the ownership record on a node, cordons
and taints with ownership (``nodes``), the eviction loop (``pods``), a node drain
(``drain``), moving device pods off a node (``migrate``), bare pods moved without
loss (``barepods``), gang restarts (``gangs``), the request to the node agent that
reset and reboot share (``agent``), spare-buffer sizing (``spares``) and the answer
to a record that cannot be read (``unknown``).

Why a package of its own, below the actions: the descheduler keeps each strategy
independent and its evictor apart, so that adding, changing or removing a strategy
touches no other. Here too an action module imports only this package (and
``base``, ``context``), never another action, and import-linter holds it (the
independence and layers contracts in ``pyproject.toml``, listed in docs/design.md).
When two actions need the same step, the step moves here; the action keeps its
parameters, their validation and its undo.

"ops" in the field's sense: each module is an operation on the cluster (or the
reading that decides one), the way ``kubectl``'s ``drain`` package serves both
``kubectl drain`` and ``kubectl cordon``, not a kind of action.
"""
