"""Offline linear evaluation of a pretrained checkpoint (any of the four methods).

    python main_linear.py pretrained_feature_extractor=trained_models/bayesncl/RUN/NAME.ckpt
    python main_linear.py data.dataset=fashion-mnist pretrained_feature_extractor=PATH max_epochs=10
"""

import hydra
from omegaconf import DictConfig

from solo_bayesncl.registration import require_solo_learn


@hydra.main(version_base="1.2", config_path="scripts/linear/cifar", config_name="linear")
def main(cfg: DictConfig) -> None:
    from solo_bayesncl.cli.linear import linear_eval

    linear_eval(cfg)


if __name__ == "__main__":
    require_solo_learn("main_linear.py")
    main()
