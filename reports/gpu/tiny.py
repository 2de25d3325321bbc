"""The dry run's label model: a tiny CNN, smaller than every timm model carma was trained on
(so carma's estimate for it shows the below-spread bound). `dump_model.py --module tiny:tiny
--input-shape 3,32,32` summarises it."""

from torch import nn

INPUT_SHAPE = (3, 32, 32)


def tiny():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
