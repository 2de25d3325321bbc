#!/bin/bash
#SBATCH --job-name=wmt-big
#SBATCH --partition=learn
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=10
#SBATCH --mem=480G
#SBATCH --time=4320
#SBATCH --output=/checkpoint/%u/wmt/%j.log
#SBATCH --signal=B:USR1@180
#SBATCH --open-mode=append

srun --label python train.py data-bin/wmt16 --arch transformer_vaswani_wmt_en_de_big
