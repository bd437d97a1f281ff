#!/bin/bash
# Second, short GPU call: one seed of the default agent, 4 envs (training from the first finished episodes at 2000 steps).
set -u
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable TF_CPP_MIN_LOG_LEVEL=2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.gpu/whl}/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD/.gpu/site:$PWD
B=${B:-"--suite dmc --task cartpole-swingup --seeds 0 --env-steps 50000 --size size12m --train-ratio 512 --batch 16 --seq-len 64 --num-envs 4 --log-every 2500 --random-episodes 0"}
timeout -k 5 ${LC_S:-235} python3 benchmarks/learning_curve.py $B --out $OUT/dmc_cartpole-swingup_4envs.jsonl --runs /tmp/runs > /tmp/lc.log 2>&1
timeout 40 python3 benchmarks/learning_curve.py $B --out $OUT/dmc_cartpole-swingup_4envs.jsonl --runs /tmp/runs --plot-only > /tmp/h.log 2>&1
tail -c 600 /tmp/lc.log | tr '\r' '\n' | tail -3; tail -c 400 /tmp/h.log; wc -l $OUT/*.jsonl
