#!/bin/bash
#SBATCH --job-name=colossal-gpt
#SBATCH --gres=gpu:4
#SBATCH --mem-per-gpu=32G
#SBATCH --time=24:00:00
#SBATCH --output=%x_%j.out
#SBATCH --dependency=singleton
colossalai run --nproc_per_node 4 train.py --config gpt2_config.py
