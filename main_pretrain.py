"""Self-supervised pretraining with solo-learn, with ``bayesncl`` and ``ncl`` registered.

python main_pretrain.py --config-name bayesncl.yaml                  # CIFAR-100, the paper's run
python main_pretrain.py --config-name ncl.yaml data.dataset=fashion-mnist max_epochs=5
python main_pretrain.py --config-path scripts/pretrain/imagenet-100 --config-name bayesncl.yaml

The same as the installed ``solo-bayesncl-pretrain`` command (:func:`solo_bayesncl.cli.pretrain.main`).
"""

from solo_bayesncl.cli.invocation import run_main

if __name__ == "__main__":  # a Ctrl-C while torch and solo-learn load is one line too
    raise SystemExit(run_main("solo_bayesncl.cli.pretrain", "pretraining"))
