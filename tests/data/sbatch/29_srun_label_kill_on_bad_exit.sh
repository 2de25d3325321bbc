#!/bin/bash
#SBATCH -N 1
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --time=2:00:00
#SBATCH --job-name=pretrain-345m
#SBATCH --exclusive
srun --label --kill-on-bad-exit=1 -u python pretrain_gpt.py --tensor-model-parallel-size 2
