#!/bin/bash
#SBATCH --job-name=wmt-big
#SBATCH --ntasks=8
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --time=1-00:00:00
srun python train.py data-bin/wmt16 --arch transformer_big
