"""Which layer (or mix of layers) of a model tells the hazards categories apart (dev only).

The joint category heads' recipe (plguard_lab.training.joint) cross-validated over 5 folds of dev
request items, on the pool state of every layer, or on named mixes (states concatenated):
log-loss and top-1 (own category first). Needs every layer's states in the feature store:

    python scripts/results/hazards_layer_scan.py MODEL.gguf single        # one layer at a time
    python scripts/results/hazards_layer_scan.py MODEL.gguf mix pool@9+28 prefix@28 ...
    python scripts/results/hazards_layer_scan.py MODEL.gguf strengths pool@8 pool@9 # C grid
    python scripts/results/hazards_layer_scan.py MODEL.gguf mlp pool@8 pool@8+9+28  # non-linear

(the states at every layer are extracted by `scripts/heads_features.py --model MODEL
--policies hazards --prefix-only --layers all --sources ...`, about 40 min for the 1.5B
model's 1,936 dev requests on 2 cores).
"""
import sys
import time

import numpy as np

from plguard.backends import load_backend
from plguard.config import GuardConfig
from plguard.policy import load_policy
from plguard_lab.training.corpus import load_corpus
from plguard_lab.training.features import Extractor, FeatureStore, default_store_path
from plguard_lab.training.fit import MIN_CLASS, labels_for
from plguard_lab.training.joint import (
    _classes,
    _log_loss,
    _oof_logits,
    category_predicates,
    item_folds,
    top1,
)

model = sys.argv[1]
cfg = GuardConfig.from_dict({"generator": {"path": model}, "policy": "hazards"})
b = load_backend(cfg.grounder_model)
pol = load_policy("hazards")
SOURCES = ("xstest", "ailuminate", "coconot", "coconot_plain", "coconot_hazards", "plguard_s14")
items = [it for it in load_corpus(SOURCES, "dev") if it.response is None]
L = list(range(1, b.n_layers + 1))
ex = Extractor(b, pol.predicates, cfg.grounding, FeatureStore(default_store_path(b)),
               tuple(L), questions=False, pairs=False, pool=True)
names = list(category_predicates(pol))
lab = labels_for(pol, items)
Y = np.stack([lab[n] for n in names], 1)
keep = [j for j in range(len(names)) if np.nansum(Y[:, j]) >= MIN_CLASS]  # as the joint fit
Y = Y[:, keep]
rows, cls, wts = _classes(Y)
feats = ex.store.get([ex.state_key(it, r) for it in items for r in ("prefix", "pool")])
print(len(feats), "features of", 2 * len(items), flush=True)  # equal texts share a key


def X(readout, layers):
    return np.hstack([np.stack([feats[ex.state_key(it, readout)].states[L.index(la)]
                                for it in items]) for la in layers]).astype(np.float64)


def run(name, x, C=0.03):
    t = time.time()
    z = _oof_logits(x, rows, cls, wts, C, len(items))
    print(f"{name} C={C}: logloss {_log_loss(z, rows, cls, wts):.4f} "
          f"top1 {top1(z, rows, cls):.3f} ({time.time() - t:.0f}s)", flush=True)
    return z


def mlp_oof(x, epochs, hidden=256, seed=0):
    """Out-of-fold logits of a one-hidden-layer network, the same folds as the linear fit.

    Is the ceiling the head's linearity? GELU, dropout 0.2 on the input and 0.5 on the
    hidden layer, AdamW (weight decay 0.01), class-weighted cross-entropy as the joint fit.
    """
    import torch

    K = int(cls.max()) + 1
    out = np.full((len(items), K), np.nan)
    for tr, te in item_folds(rows, cls):
        torch.manual_seed(seed)
        fit_items = np.unique(rows[tr])
        mu, sd = x[fit_items].mean(0), x[fit_items].std(0) + 1e-6
        xt = torch.tensor((x[rows[tr]] - mu) / sd, dtype=torch.float32)
        yt, wt = torch.tensor(cls[tr]), torch.tensor(wts[tr], dtype=torch.float32)
        net = torch.nn.Sequential(torch.nn.Dropout(0.2), torch.nn.Linear(x.shape[1], hidden),
                                  torch.nn.GELU(), torch.nn.Dropout(0.5),
                                  torch.nn.Linear(hidden, K))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-2)
        for _ in range(epochs):
            perm = torch.randperm(len(xt))
            for b in range(0, len(perm), 64):
                ix = perm[b:b + 64]
                loss = torch.nn.functional.cross_entropy(net(xt[ix]), yt[ix], reduction="none")
                loss = (loss * wt[ix]).sum() / wt[ix].sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
        net.eval()
        te_items = np.unique(rows[te])
        with torch.no_grad():
            out[te_items] = net(torch.tensor((x[te_items] - mu) / sd,
                                             dtype=torch.float32)).numpy()
    return out


def spec_X(spec):
    ro, ls = spec.split("@")
    return X(ro, tuple(int(v) for v in ls.split("+")))


mode = sys.argv[2] if len(sys.argv) > 2 else "single"
if mode == "single":
    for la in L:
        run(f"pool@{la}", X("pool", (la,)))
elif mode == "strengths":  # the fit picks C by log-loss; does another C rank better?
    for spec in sys.argv[3:]:
        for C in (0.003, 0.01, 0.03, 0.1, 0.3, 1.0):
            run(spec, spec_X(spec), C)
elif mode == "mlp":
    for spec in sys.argv[3:]:
        for ep in (20, 40):
            t = time.time()
            z = mlp_oof(spec_X(spec), ep)
            print(f"mlp {spec} epochs={ep}: logloss {_log_loss(z, rows, cls, wts):.4f} "
                  f"top1 {top1(z, rows, cls):.3f} ({time.time() - t:.0f}s)", flush=True)
else:
    for spec in sys.argv[3:]:
        run(spec, spec_X(spec))
