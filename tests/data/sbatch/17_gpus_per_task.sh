#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-gpu=6
#SBATCH --time=6:00:00
#SBATCH --job-name=ddp-2
srun python ddp.py
