"""The plguard laboratory: evaluation studies, the viewer, labelled data, heads training.

Installed with ``pip install 'plguard[lab]'`` (scipy, scikit-learn, datasets); the product
(:mod:`plguard`) never imports it, and its commands (``plguard eval``, ``report``,
``view``, ``heads fit`` ...) say which extra to install when it is missing.

At the top, what the studies share: argument types (``args``), JSON helpers (``jsonx``),
metrics and the command registrations (``cli``, ``tools_cli``). Then:

- ``studies/``: one folder per study (``xstest``, ``gold``, ``quality``, ``tuning``,
  ``attacks``, ``content``, ``hazards``, ``heads``), each with its runner, report and README;
- ``view/``: ``plguard view``, the local web viewer of runs and traces;
- ``labels/``: XSTest's prompts and labelled completions, its split, gold predicate values;
- ``training/``: heads training (``plguard heads fit``).

Submodules are imported on use; importing this package loads nothing heavy.
"""
