#!/bin/bash
#SBATCH --job-name=multinode-ft
#SBATCH -D .
#SBATCH --output=O-%x.%j
#SBATCH --error=E-%x.%j
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=96
#SBATCH --gres=gpu:4
#SBATCH --time=01:59:00

export GPUS_PER_NODE=4
head_node_ip=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
srun accelerate launch --num_processes $((SLURM_NNODES * GPUS_PER_NODE)) --main_process_ip $head_node_ip run_glue.py
