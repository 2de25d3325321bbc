#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --gpus=2
#SBATCH --time=01:00:00
#SBATCH --job-name=horovod-2
module load openmpi
srun --mpi=pmix python train_hvd.py
