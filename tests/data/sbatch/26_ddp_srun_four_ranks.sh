#!/bin/bash
#SBATCH --job-name=ddp-4
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4          # one task per GPU
#SBATCH --gres=gpu:4
#SBATCH --time=00:10:00
#SBATCH --output=ddp-%j.out
# single-node DDP: srun starts one rank per task; the training code reads SLURM_PROCID
export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500
srun python train.py --epochs 1
