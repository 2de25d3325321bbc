#!/bin/bash
#SBATCH --job-name=resumable
#SBATCH --gres=gpu:1
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=resumable-%j.log

trap 'echo "checkpoint and requeue"; scontrol requeue $SLURM_JOB_ID' USR1
python train.py --checkpoint-dir ckpt &
wait
