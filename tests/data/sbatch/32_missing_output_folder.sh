#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-3
#SBATCH --gres=gpu:1
#SBATCH --time=15
#SBATCH --output=results/%x_%a.out
python sweep.py --trial $SLURM_ARRAY_TASK_ID
