#!/bin/bash
#SBATCH -J gpt-per-task
#SBATCH --ntasks=2
#SBATCH --gpus-per-task=1
#SBATCH -c 1
#SBATCH -t 30
#SBATCH -o per-task-%j.out
srun --cpus-per-task=1 python main.py --strategy ddp
