#!/bin/bash
#SBATCH --time=14-0
#SBATCH --gpus=2
#SBATCH --qos=long
#SBATCH --job-name=pretrain-long
#SBATCH --output=pretrain-%j.out
#SBATCH --error=pretrain-%j.err
python pretrain.py --resume auto
