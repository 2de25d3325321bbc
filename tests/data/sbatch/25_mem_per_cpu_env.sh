#!/bin/sh
#SBATCH --job-name=cpudump
#SBATCH --mem-per-cpu=1G
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --gres=gpu:1
#SBATCH --time=5
#SBATCH --no-requeue
#SBATCH --output=cpu_%j.out
# memory per CPU times the CPUs of every task, on one node
env | grep -E '^SLURM_(MEM|CPUS|NTASKS|NPROCS)' | sort
