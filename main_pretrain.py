"""Self-supervised pretraining with solo-learn, with ``bayesncl`` and ``ncl`` registered.

python main_pretrain.py --config-name bayesncl.yaml                  # CIFAR-100, the paper's run
python main_pretrain.py --config-name ncl.yaml data.dataset=fashion-mnist max_epochs=5
python main_pretrain.py --config-path scripts/pretrain/imagenet-100 --config-name bayesncl.yaml
"""

import hydra
from omegaconf import DictConfig

from solo_bayesncl.registration import require_solo_learn


@hydra.main(version_base="1.2", config_path="scripts/pretrain/cifar", config_name="bayesncl")
def main(cfg: DictConfig) -> None:
    from solo_bayesncl.cli.pretrain import pretrain

    pretrain(cfg)


if __name__ == "__main__":
    require_solo_learn("main_pretrain.py")
    main()
