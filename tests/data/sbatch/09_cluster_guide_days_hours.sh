#!/bin/bash
#SBATCH -n 1                # one task
#SBATCH -N 1                # all cores on one machine
#SBATCH -t 0-12:00          # runtime in D-HH:MM
#SBATCH -p gpu              # partition to submit to
#SBATCH --mem=8000          # memory pool for all cores (MB)
#SBATCH --gres=gpu:1
#SBATCH -o myoutput_%j.out  # standard out goes here
#SBATCH -e myerrors_%j.err  # standard err goes here

module load cuda/12.2
./gpu_program
