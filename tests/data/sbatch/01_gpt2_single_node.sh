#!/bin/bash
#SBATCH --job-name=gpt2-124m
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=32
#SBATCH --time=48:00:00
#SBATCH --exclusive
#SBATCH --output=logs/%x-%j.out

# one process launches the per-GPU workers itself
cd "$SLURM_SUBMIT_DIR"
torchrun --standalone --nproc_per_node=4 train.py config/train_gpt2.py
