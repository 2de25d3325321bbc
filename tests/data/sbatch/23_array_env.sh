#!/bin/bash
#SBATCH --job-name=envdump
#SBATCH --array=3-5
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=2
#SBATCH --time=5
#SBATCH --output=env_%A_%a.out
# prints what the job sees, as array examples in HPC wikis do
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT"
env | grep '^SLURM' | sort
