#!/bin/bash
#SBATCH --array=1-10%3
#SBATCH --gres=gpu:1
#SBATCH --time=15
#SBATCH -o logs/%A_%a.out
#SBATCH -J lr-sweep

LR=$(sed -n "${SLURM_ARRAY_TASK_ID}p" lrs.txt)
python train.py --lr "$LR" --seed "$SLURM_ARRAY_TASK_ID"
