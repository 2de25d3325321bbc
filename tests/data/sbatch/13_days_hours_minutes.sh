#!/bin/bash
#SBATCH -t 1-12:30
#SBATCH --gres=gpu:a100:2
#SBATCH -c 16
#SBATCH --job-name=vit-b16
python train.py --model vit_base_patch16_224 --batch-size 256
