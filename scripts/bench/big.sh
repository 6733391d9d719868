#!/usr/bin/env bash
# Issue 17's measurements of big checkpoints on a small machine
# (docs/performance.md, "Big checkpoints", records the results). Each step
# is one or more processes of `probe bench` (load time, weight bytes
# resident, peak RSS, tokens/s as one JSON object) or `probe sweep` under
# GNU time (peak RSS); the checkpoints are written once by `probe generate`
# into $WORK and reused.
#
#   scripts/bench/big.sh                       # every step
#   STEPS="load gated32k" scripts/bench/big.sh
#
# Steps:
#   load       open to the end of the first forward pass (T = 16) of the
#              Qiu-shaped 1.72B gated model, bf16 and float32 files
#   gated32k   that model at T = 32768 with every App. I diagnostic: bf16
#              weights and float32 weights in the same run, alternating
#   sweep      the paper's App. I sweep (--lengths 1k,2k,4k,6k,8k,10k
#              --samples 5, 155k tokens) on the bf16 file, f32 arithmetic
#   sweepbf16  the same sweep with --compute bf16
#   llama8b    the Llama-3.1-8B shape (untied head) in bf16 at T = 8192
#   llama8b_q4km  issue 30 item 3: that checkpoint written to a BF16 GGUF
#              (scripts/gguf/hf2gguf -type bf16), quantized to Q4_K_M by
#              llama.cpp's llama_model_quantize (scripts/gguf/ggml_ref.py,
#              2 threads; the BF16 GGUF is deleted after), and probe bench
#              at T = 8192 with every App. I diagnostic on the Q4_K_M file
#              and the bf16 checkpoint alternating, ROUNDS8B rounds
#              (default 1; 8–20 min a pass on 2 cores); one JSON line per
#              process and a summary: targets Q4_K_M peak RSS ≤ 8 GB
#              (8·10⁹ bytes, 7,629 MiB) and bf16 tokens/s ≤ 1.3 × Q4_K_M's
#   qwen35     the Qwen3.5-0.8B shape in bf16 at T = 131072 (128k)
#
# Issues 27 and 31 (item 5 of each; docs/performance.md, "MoE, MXFP4 and
# Mamba-2 at scale"). Each prints one JSON line per process, {"step":
# …, "label": …} followed by probe bench's fields, and a summary line
# with the target:
#   gptoss20b    gpt-oss-20b's shape (24 layers, d_model 2880, 64 query / 8
#                KV heads × 64, 32 experts of width 2880, top 4, vocabulary
#                201088, window 128 on the even layers, sinks, untied) with
#                its experts in MXFP4 as released, the rest bf16, at
#                T = 4096 with every App. I diagnostic (--reductions all);
#                target peak RSS ≤ 16 GiB
#   olmoe        OLMoE-1B-7B's shape (16 layers, d_model 2048, 16 heads × 128,
#                64 experts of width 1024, top 8, vocabulary 50304, untied)
#                in bf16 at T = 4096, plain pass, alternating OLMOE_ROUNDS
#                (default 3) times with a
#                dense Llama-layout model of the same active parameters:
#                the same attention, embeddings and head, and an MLP of
#                width k·moe width = 8·1024 = 8192 (the 8 experts' matrices
#                side by side; the router's 2048×64 per layer, 0.16 % of the
#                active parameters, is the difference); targets peak RSS
#                ≤ 16 GiB and tokens/s ratio MoE / dense ≥ 0.7
#   mamba2_780m  Mamba-2-780M's shape (48 layers, d_model 1536, expand 2,
#                48 heads × 64, state 128, one group, conv 4, chunk_size 256,
#                vocabulary 50288, tied) in bf16 at T = 32768: `probe gdn`
#                itself with its defaults (Parquet only: the CSV of 75 M
#                rows would be ~10 GB) on 32768 random ids, under GNU time
#                (peak RSS, user + system CPU seconds); target peak RSS
#                ≤ 4 GiB
#   falconh1_05b Falcon-H1-0.5B's shape (36 layers, d_model 1024, attention
#                8 query / 2 KV heads × 64, Mamba-2 of 1536 channels in 24
#                heads × 64, state 128, one group, conv 4, chunk_size 128,
#                MLP 2048, vocabulary 32784, untied) likewise
#   scan         BenchmarkSSMScan (one head of the 780M shape, P = 64,
#                N = 128, T = 4096): the chunked scan's tokens/s per chunk
#                and the default chunk's ratio to the recurrence
#   scanmodel    the whole Mamba-2-780M shape at T = SCAN_T (default 4096),
#                probe bench --modes ssm-recurrent --reps 2: the plain pass
#                with the chunked scan and with the recurrence alternating
#                in one process; tokens/s and CPU seconds of each and the
#                ratio
#
# Environment: WORK (default /tmp/probe-big; ~30 GB of checkpoints),
# ROUNDS8B (llama8b_q4km's rounds, default 1), NLC (node-llama-cpp's
# folder, default third_party/node-llama-cpp),
# STEPS, GEN_MEMLIMIT (GOMEMLIMIT of probe generate, default 18GiB; the
# 20B MXFP4 shape holds 13 GiB while it is written: 15GiB keeps a 24 GB
# machine's peak under 17 GB).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/probe-big}
steps=${STEPS:-load gated32k sweep sweepbf16 llama8b llama8b_q4km qwen35 gptoss20b olmoe mamba2_780m falconh1_05b scan scanmodel}
mkdir -p "$work"
go build -C "$root" -o "$work/probe" ./cmd/probe
probe=$work/probe
say() { echo "== $* (load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S))"; }

gen() { # dir, generate flags...
	local dir=$1
	shift
	[[ -f $work/$dir/config.json ]] && return
	# the weight matrices are made in the stored dtype; GOMEMLIMIT keeps the
	# collector's headroom off the 16 GB of an 8B model's bf16 weights
	GOMEMLIMIT=${GEN_MEMLIMIT:-18GiB} "$probe" generate "$@" --out "$work/$dir" >/dev/null
}
llama8b=(--arch llama --layers 32 --d-model 4096 --heads 32 --kv-heads 8 --d-mlp 14336 --vocab 128256
	--max-pos 131072 --tie-embeddings=false --dtype bf16 --shard-size 5GB)
gated=(--arch gated --layers 28 --d-model 2048 --heads 16 --kv-heads 8 --d-mlp 6144 --vocab 151936 --max-pos 40960)
bench() { # label, bench flags...
	local label=$1
	shift
	printf '%-28s ' "$label"
	"$probe" bench "$@" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("load %.2f s  first pass %.1f s  best pass %.1f s  %.0f tok/s  weights %.0f MiB  peak RSS %.0f MiB" % (
    r["load_seconds"], r["first_pass_seconds"], r["seconds"], r["tokens_per_s"], r["weight_mib"], r["peak_rss_mib"]))'
}
# jsonbench step label bench-flags...: one JSON line, {"step", "label"},
# the process's user and system CPU seconds (GNU time) and probe bench's
# object, also kept as $work/<step>-<label>.json
jsonbench() {
	local step=$1 label=$2
	shift 2
	/usr/bin/time -f '{"user_s": %U, "sys_s": %S}' -o "$work/$step-$label.time" "$probe" bench "$@" >"$work/$step-$label.json"
	python3 -c '
import json, sys
r = {"step": sys.argv[1], "label": sys.argv[2]}
r.update(json.load(open(sys.argv[4])))
r.update(json.load(open(sys.argv[3])))
json.dump(r, open(sys.argv[3], "w"))
print(json.dumps(r))' "$step" "$label" "$work/$step-$label.json" "$work/$step-$label.time"
}
# summary step json-expression: one JSON line computed by python from the
# kept objects (b(label) reads $work/<step>-<label>.json)
summary() {
	python3 -c '
import json, sys
step, work = sys.argv[1], sys.argv[3]
def b(label): return json.load(open("%s/%s-%s.json" % (work, step, label)))
r = {"step": step, "summary": True}
r.update(eval(sys.argv[2]))
print(json.dumps(r))' "$1" "$2" "$work"
}
timed() { # label, command...
	local label=$1
	shift
	/usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; return 1; }
	read -r secs kb <"$work/time.txt"
	printf '%-28s wall %.0f s (%.1f min)  peak RSS %.0f MiB\n' "$label" "$secs" "$(echo "$secs/60" | bc -l)" "$(echo "$kb/1024" | bc -l)"
}

for step in $steps; do
	case $step in
	load)
		gen gated-bf16 "${gated[@]}" --dtype bf16 --shard-size 2GB
		gen gated-f32 "${gated[@]}"
		say "load: open to the end of the first pass, T = 16"
		for r in 1 2 3; do
			bench "bf16 (round $r)" --model "$work/gated-bf16" --tokens 16 --reps 1 --no-diagnostics
			bench "f32 (round $r)" --model "$work/gated-f32" --tokens 16 --reps 1 --no-diagnostics
		done
		;;
	gated32k)
		gen gated-bf16 "${gated[@]}" --dtype bf16 --shard-size 2GB
		gen gated-f32 "${gated[@]}"
		say "1.72B gated, T = 32768, every diagnostic"
		bench "bf16 weights" --model "$work/gated-bf16" --tokens 32768 --reps 1
		bench "f32 weights" --model "$work/gated-f32" --tokens 32768 --reps 1
		;;
	sweep | sweepbf16)
		gen gated-bf16 "${gated[@]}" --dtype bf16 --shard-size 2GB
		ids=$work/ids-200k.json # a fixed stream of random token ids (seed 1): the sweep's cost does not depend on the text
		[[ -f $ids ]] || python3 -c 'import json, random; random.seed(1); print(json.dumps([random.randrange(151936) for _ in range(200000)]))' >"$ids"
		compute=f32
		[[ $step == sweepbf16 ]] && compute=bf16
		say "App. I sweep, 155k tokens, --compute $compute"
		rm -rf "$work/sweep-$compute"
		timed "sweep --compute $compute" "$probe" sweep --model "$work/gated-bf16" --ids "$ids" \
			--lengths 1k,2k,4k,6k,8k,10k --samples 5 --compute "$compute" --progress=false --out "$work/sweep-$compute"
		grep -i "deviation" "$work/out.txt" || true
		;;
	llama8b)
		gen llama8b-bf16 "${llama8b[@]}"
		say "Llama-3.1-8B shape, bf16, T = 8192, every diagnostic"
		bench "llama 8B bf16" --model "$work/llama8b-bf16" --tokens 8192 --reps 1
		;;
	llama8b_q4km)
		gen llama8b-bf16 "${llama8b[@]}"
		q4=$work/llama8b-q4_k_m.gguf
		if [[ ! -f $q4 ]]; then
			lib=${NLC:-$root/third_party/node-llama-cpp}/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
			[[ -f $lib/libggml-base.so ]] || { echo "big.sh: no llama.cpp library in $lib (bash .ci/setup.sh installs it)" >&2; exit 2; }
			say "Llama-3.1-8B shape: bf16 checkpoint -> BF16 GGUF -> Q4_K_M (llama.cpp)"
			go run -C "$root" ./scripts/gguf/hf2gguf -type bf16 "$work/llama8b-bf16" "$work/llama8b-bf16.gguf"
			python3 "$root/scripts/gguf/ggml_ref.py" "$lib" quantize "$work/llama8b-bf16.gguf" "$q4.tmp" 15 2 >"$work/quantize.log" 2>&1 ||
				{ tail -20 "$work/quantize.log"; exit 1; }
			grep "size  =" "$work/quantize.log" || true
			mv "$q4.tmp" "$q4"
			rm -f "$work/llama8b-bf16.gguf"
		fi
		say "Llama-3.1-8B shape, bf16 checkpoint and Q4_K_M GGUF alternating, T = 8192, every diagnostic"
		for ((r = 1; r <= ${ROUNDS8B:-1}; r++)); do
			jsonbench llama8b_q4km "q4km_$r" --model "$q4" --tokens 8192 --reps 1
			jsonbench llama8b_q4km "bf16_$r" --model "$work/llama8b-bf16" --tokens 8192 --reps 1
		done
		# fastest pass of each file; the targets: bf16 / Q4_K_M tokens/s ≤ 1.3, Q4_K_M peak RSS ≤ 8·10⁹ bytes
		summary llama8b_q4km "(lambda bf, q: (lambda bt, qt, qr: {'bf16_tokens_per_s': bt, 'q4km_tokens_per_s': qt,
			'ratio_bf16_over_q4km': bt / qt, 'target_ratio_max': 1.3, 'ratio_met': bt / qt <= 1.3,
			'q4km_peak_rss_mib': qr, 'bf16_peak_rss_mib': max(x['peak_rss_mib'] for x in bf), 'target_peak_rss_mib': 7629, 'rss_met': qr <= 7629,
			'cpu_s_bf16': [x['user_s'] + x['sys_s'] for x in bf], 'cpu_s_q4km': [x['user_s'] + x['sys_s'] for x in q]})(
			max(x['tokens_per_s'] for x in bf), max(x['tokens_per_s'] for x in q), max(x['peak_rss_mib'] for x in q)))(
			[b('bf16_%d' % r) for r in range(1, ${ROUNDS8B:-1} + 1)], [b('q4km_%d' % r) for r in range(1, ${ROUNDS8B:-1} + 1)])"
		;;
	qwen35)
		gen qwen35-0.8b-bf16 --arch qwen3_5 --layers 24 --d-model 1024 --heads 8 --kv-heads 2 --head-dim 256 \
			--linear-key-heads 16 --linear-value-heads 16 --linear-key-dim 128 --linear-value-dim 128 \
			--d-mlp 3584 --vocab 248320 --max-pos 262144 --dtype bf16
		say "Qwen3.5-0.8B shape, bf16, T = 131072, every diagnostic"
		bench "qwen3.5 0.8B bf16 128k" --model "$work/qwen35-0.8b-bf16" --tokens 131072 --reps 1
		;;
	gptoss20b)
		# --heads 32 then num_attention_heads 64: the small gpt_oss config
		# probe generate starts from needs d_model divisible by --heads
		# (2880 is not by 64); the head width is --head-dim
		GEN_MEMLIMIT=${GEN_MEMLIMIT:-15GiB} gen gptoss20b-mxfp4 --arch gpt_oss --layers 24 --d-model 2880 --heads 32 --kv-heads 8 --set num_attention_heads=64 \
			--head-dim 64 --d-mlp 2880 --vocab 201088 --max-pos 131072 --set num_local_experts=32 --set num_experts_per_tok=4 \
			--set sliding_window=128 --expert-format mxfp4 --dtype bf16 --shard-size 5GB
		say "gpt-oss-20b shape, MXFP4 experts, T = 4096, every App. I diagnostic"
		jsonbench gptoss20b mxfp4 --model "$work/gptoss20b-mxfp4" --tokens 4096 --reps 1 --reductions all
		summary gptoss20b '{"peak_rss_mib": b("mxfp4")["peak_rss_mib"], "target_peak_rss_mib": 16384, "met": b("mxfp4")["peak_rss_mib"] <= 16384}'
		;;
	olmoe)
		shape=(--layers 16 --d-model 2048 --heads 16 --kv-heads 16 --vocab 50304 --max-pos 4096 --tie-embeddings=false --dtype bf16)
		gen olmoe-bf16 --arch olmoe "${shape[@]}" --set num_experts=64 --set num_experts_per_tok=8 --set intermediate_size=1024 --shard-size 5GB
		gen olmoe-dense-bf16 --arch llama "${shape[@]}" --d-mlp 8192
		say "OLMoE-1B-7B shape and its dense counterpart (MLP 8192), bf16, T = 4096, plain pass"
		# OLMOE_ROUNDS processes of each, alternating; each process times two
		# passes (--modes forward: wall and user+sys CPU seconds) and keeps
		# its better one, so that faulting the weights in from the page
		# cache (or the disk) after the other model ran is not counted; the
		# MoE processes also report which weights were resident (--resident)
		rounds=${OLMOE_ROUNDS:-3}
		for r in $(seq "$rounds"); do
			jsonbench olmoe "moe$r" --model "$work/olmoe-bf16" --tokens 4096 --reps 2 --modes forward --resident
			jsonbench olmoe "dense$r" --model "$work/olmoe-dense-bf16" --tokens 4096 --reps 2 --modes forward
		done
		# the summary: medians over the rounds of each process's better pass;
		# ratio_wall = MoE / dense tokens/s, ratio_cpu = dense / MoE CPU s
		python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def runs(m): return [json.load(open("%s/olmoe-%s%d.json" % (work, m, r))) for r in range(1, rounds + 1)]
moe, dense = runs("moe"), runs("dense")
med = lambda rs, k: statistics.median(r["modes"][0][k] for r in rs)
print(json.dumps({"step": "olmoe", "summary": True, "rounds": rounds,
    "moe_tokens_per_s": med(moe, "tokens_per_s"), "dense_tokens_per_s": med(dense, "tokens_per_s"),
    "moe_cpu_seconds": med(moe, "cpu_seconds"), "dense_cpu_seconds": med(dense, "cpu_seconds"),
    "ratio_wall": med(moe, "tokens_per_s") / med(dense, "tokens_per_s"),
    "ratio_cpu": med(dense, "cpu_seconds") / med(moe, "cpu_seconds"), "target_ratio": 0.7,
    "moe_peak_rss_mib": max(r["peak_rss_mib"] for r in moe), "target_peak_rss_mib": 16384}))
PY
		;;
	mamba2_780m | falconh1_05b)
		if [[ $step == mamba2_780m ]]; then
			gen mamba2-780m-bf16 --arch mamba2 --layers 48 --d-model 1536 --vocab 50288 --set num_heads=48 --set head_dim=64 \
				--set state_size=128 --set n_groups=1 --set chunk_size=256 --set tie_word_embeddings=true --dtype bf16
			dir=mamba2-780m-bf16 vocab=50288
		else
			gen falconh1-0.5b-bf16 --arch falcon_h1 --layers 36 --d-model 1024 --heads 8 --kv-heads 2 --d-mlp 2048 --vocab 32784 --head-dim 64 \
				--max-pos 16384 --set mamba_d_ssm=1536 --set mamba_n_heads=24 --set mamba_d_head=64 --set mamba_d_state=128 \
				--set mamba_n_groups=1 --set mamba_chunk_size=128 --dtype bf16
			dir=falconh1-0.5b-bf16 vocab=32784
		fi
		python3 -c 'import json, random, sys; random.seed(1); json.dump([random.randrange(int(sys.argv[1])) for _ in range(32768)], open(sys.argv[2], "w"))' \
			"$vocab" "$work/$step-ids.json"
		say "$step shape, bf16, T = 32768, probe gdn with its default measurement"
		rm -rf "$work/$step-gdn"
		# --allow-extrapolation: Falcon-H1-0.5B's max_position_embeddings is 16384
		/usr/bin/time -f "%e %U %S %M" -o "$work/$step-time.txt" "$probe" gdn --model "$work/$dir" --ids "$work/$step-ids.json" \
			--lengths 32768 --samples 1 --format parquet --allow-extrapolation --out "$work/$step-gdn" >"$work/$step-gdn.txt"
		read -r secs user sys kb <"$work/$step-time.txt"
		python3 -c '
import json, sys
secs, user, sys_, kb = map(float, sys.argv[2:6])
mib = kb / 1024
print(json.dumps({"step": sys.argv[1], "summary": True, "peak_rss_mib": mib, "target_peak_rss_mib": 4096, "met": mib <= 4096,
    "wall_seconds": secs, "cpu_seconds": user + sys_, "tokens_per_s": 32768 / secs, "out": open(sys.argv[6]).read().strip()}))' \
			"$step" "$secs" "$user" "$sys" "$kb" "$work/$step-gdn.txt"
		rm -rf "$work/$step-gdn"
		;;
	scan)
		say "BenchmarkSSMScan: chunked scan against the recurrence"
		go test -C "$root" ./model -run '^$' -bench '^BenchmarkSSMScan$' -benchtime 5x >"$work/scan.txt"
		python3 -c '
import json, re, sys
tps = {}
for line in open(sys.argv[1]):
    m = re.match(r"BenchmarkSSMScan/chunk=(-?\d+)\S*\s+\d+\s+\d+ ns/op\s+([\d.e+]+) tokens/s", line)
    if m:
        tps[int(m.group(1))] = float(m.group(2))
rec = tps.pop(-1)
print(json.dumps({"step": "scan", "head": "P 64, N 128, T 4096", "recurrence_tokens_per_s": rec,
    "chunked_tokens_per_s": {str(c): v for c, v in sorted(tps.items())},
    "ratio_default_chunk_64": tps[64] / rec, "ratio_best": max(tps.values()) / rec}))' "$work/scan.txt"
		;;
	scanmodel)
		gen mamba2-780m-bf16 --arch mamba2 --layers 48 --d-model 1536 --vocab 50288 --set num_heads=48 --set head_dim=64 \
			--set state_size=128 --set n_groups=1 --set chunk_size=256 --set tie_word_embeddings=true --dtype bf16
		say "scanmodel: Mamba-2-780M shape, T = ${SCAN_T:-4096}, chunked scan and recurrence alternating"
		jsonbench scanmodel t${SCAN_T:-4096} --model "$work/mamba2-780m-bf16" --tokens "${SCAN_T:-4096}" --reps 2 --modes ssm-recurrent
		summary scanmodel '{m["mode"]: {"tokens_per_s": m["tokens_per_s"], "cpu_seconds": m["cpu_seconds"]} for m in b("t'"${SCAN_T:-4096}"'")["modes"]} | {
			"chunked_speedup_cpu": b("t'"${SCAN_T:-4096}"'")["modes"][1]["cpu_seconds"] / b("t'"${SCAN_T:-4096}"'")["modes"][0]["cpu_seconds"]}'
		;;
	*)
		echo "big.sh: unknown step $step" >&2
		exit 2
		;;
	esac
done
