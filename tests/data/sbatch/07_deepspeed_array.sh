#!/bin/bash
#SBATCH --job-name=ds-zero
#SBATCH --array=0-5%2
#SBATCH --gpus-per-node=a100:2
#SBATCH --mem-per-cpu=4G
#SBATCH --cpus-per-task=8
#SBATCH --time=2-00:00:00
#SBATCH --output=ds_%A_%a.out

STAGES=(0 1 2 3 1 2)
deepspeed --num_gpus 2 train.py --zero_stage ${STAGES[$SLURM_ARRAY_TASK_ID]}
