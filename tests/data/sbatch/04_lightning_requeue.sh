#!/bin/bash -l

# Lightning resubmits itself when it gets SIGUSR1 near the end
#SBATCH --nodes=1
#SBATCH --gres=gpu:2
#SBATCH --ntasks-per-node=2
#SBATCH --mem=0
#SBATCH --time=0-02:00:00
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue

source activate lightning
srun python train.py --trainer.devices=2 --trainer.num_nodes=1
