"""Self-supervised pretraining with solo-learn, with ``bayesncl`` and ``ncl`` registered.

python main_pretrain.py --config-name bayesncl.yaml                  # CIFAR-100, the paper's run
python main_pretrain.py --config-name ncl.yaml data.dataset=fashion-mnist max_epochs=5
python main_pretrain.py --config-path scripts/pretrain/imagenet-100 --config-name bayesncl.yaml

The same as the installed ``solo-bayesncl-pretrain`` command (:func:`solo_bayesncl.cli.pretrain.main`).
"""

from solo_bayesncl.cli.pretrain import main

if __name__ == "__main__":
    raise SystemExit(main())
