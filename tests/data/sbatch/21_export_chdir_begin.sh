#!/bin/bash
#SBATCH --export=ALL,WANDB_MODE=offline
#SBATCH --chdir=/tmp
#SBATCH --begin=now+1hour
#SBATCH --gres=gpu:1
#SBATCH --time=3:00:00
#SBATCH --no-requeue
#SBATCH -J offline-run
python train.py --report_to wandb
