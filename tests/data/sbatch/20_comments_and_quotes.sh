#!/bin/bash
# a header comment, then directives with comments after them
#SBATCH -J"quoted-name"   # the name
#SBATCH --gres gpu:1      # one GPU, value after a space
#SBATCH -t90              # short option with its value attached: 90 minutes

#SBATCH --output "out dir/%x.out"   # a quoted path with a space
echo start
#SBATCH --gres=gpu:2      # after the first command: not read, as Slurm
python train.py
