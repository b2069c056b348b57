"""Heads training: the corpus, its features, the fit, its selection by held-out source.

What ``plguard heads fit`` runs (:mod:`plguard_lab.training.cli`). The product keeps what
reads a fitted file (:mod:`plguard.heads.apply`, :mod:`plguard.heads.artefact`) and the
shipped heads; training needs the ``lab`` extra (scikit-learn, scipy, datasets).
"""
