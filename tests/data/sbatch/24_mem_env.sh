#!/bin/sh
#SBATCH --job-name=memdump
#SBATCH --mem=2G
#SBATCH -c 2
#SBATCH --gres=gpu:1
#SBATCH --time=5
#SBATCH --output=mem_%j.out
# prints the memory and CPU figures the job is told, as HPC wiki examples do
env | grep -E '^SLURM_(MEM|CPUS|NTASKS|NPROCS)' | sort
