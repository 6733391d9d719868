package main

import "github.com/spf13/cobra"

// usage is each command's use line, summary, example and, where it takes
// any, positional arguments (cobra's Use, Short, Example and Args; nil
// Args: none), by the command's path below probe: the text of probe help
// and probe <command> --help in one place, which newCmd completes.
var usage = map[string]cobra.Command{
	"bench": {
		Use:     "bench --model <dir|org/name> [--tokens T] [--reps N] [--no-diagnostics | --modes forward,ssm-recurrent,gdn,gdn-w-rows,sinks,massive|all] [--ids <file> | --text <file>]",
		Short:   "forward-pass speed and peak RSS as one JSON object, alone or beside each diagnostic's consumers (--modes)",
		Example: "probe bench --model zoo/checkpoints/qwen3_base --tokens 1024 --reps 3",
	},
	"capture": {
		Use:     "capture --model <dir|org/name> (--ids <file> | --text <file> [--max-tokens N] [--tokenizer F]) --hook <name> ... --out <file.safetensors>",
		Short:   "run one forward pass and write the chosen hook points' activations to a safetensors file",
		Example: "probe capture --model zoo/checkpoints/gated_headwise --text README.md --max-tokens 256 --hook 'blocks.*.attn.hook_pattern' --out cap.safetensors",
	},
	"demo": {
		Use:     "demo [--out <dir>] [--static]",
		Short:   "the whole story on the embedded zoo checkpoints (BFT App. I, RFA parameters, AFA figures, sinks and experts, attention beside Mamba-2, perplexity, Prediction 3) in one report.html",
		Example: "probe demo --out /tmp/probe-demo",
		Args:    cobra.ArbitraryArgs,
	},
	"diag": {
		Use:     "diag --model <dir|org/name> (--ids <file> | --text <file> [--max-tokens N]) [--shard i/n] --out <file.csv>",
		Short:   "per-(sample, layer, head, query) filter diagnostics of one batch as CSV",
		Example: "probe diag --model zoo/checkpoints/gated_headwise --text README.md --max-tokens 128 --out diag.csv",
	},
	"experts": {
		Use:     "experts --model <dir> (--ids <file> | --text <file>) --lengths 1k [--margin prob|logit] [--shard i/n] --out <dir>",
		Short:   "mixture-of-experts routing per layer: expert load over all tokens, the first token vs the rest, routing weights, router entropy and top-1 margin",
		Example: "probe experts --model zoo/checkpoints/gpt_oss_tiny --text README.md --lengths 128,256 --out /tmp/experts",
	},
	"explore": {
		Use:   "explore <folder|diag.csv> [--addr 127.0.0.1] [--port 8457] | explore --model <dir> (--text <file> | --ids <file>) [--lengths 4k]",
		Short: "a local web app over a measurement folder (sweep, gdn, sinks, massive, experts; probe diag's CSV): every head's metric, one head over positions, one attention row computed on demand",
		Example: "probe explore /tmp/sweep\n" +
			"probe explore /tmp/sinks\n" +
			"probe explore diag.csv\n" +
			"probe explore --model zoo/checkpoints/gated_headwise --text README.md --lengths 256",
		Args: cobra.ArbitraryArgs,
	},
	"figures": {
		Use:     "figures --paper rfa|selrope|rt|bft|afa|all --out <dir> [--static] [--model <dir|org/name> | --series <dirs> | --history <file>]",
		Short:   "the papers' figures: analytic from their formulas, or RFA/AFA from checkpoints",
		Example: "probe figures --paper bft --out /tmp/figures",
	},
	"gdn": {
		Use:     "gdn --model <dir> (--ids <file> | --text <file>) --lengths 4k [--samples N] [--w-rows [--no-dispersion]] [--shard i/n] --out <dir>",
		Short:   "Recurrent mixers (Gated DeltaNet, Mamba-2, RWKV-7) as filters per (layer, value head, token): gain, forgetting, innovation, state norm, and with --w-rows n_eff^W, first-token share, dispersion of the exact effective attention",
		Example: "probe generate --arch qwen3_5 --vocab 2048 --out /tmp/q35 && probe gdn --model /tmp/q35 --text README.md --tokenizer zoo/checkpoints/gated_headwise/tokenizer.json --lengths 256 --out /tmp/gdn",
	},
	"generate": {
		Use:     "generate --arch <arch> [--layers N --d-model D --heads H --kv-heads K --vocab V --max-pos P] --out <new-dir> [--force]",
		Short:   "write a randomly initialized Hugging Face checkpoint of a supported architecture",
		Example: "probe generate --arch gated --layers 2 --d-model 64 --heads 4 --kv-heads 2 --out /tmp/random-gated",
	},
	"hooks": {
		Use:     "hooks [--model <dir|org/name>]",
		Short:   "list the hook points with their shapes, or the points one model issues",
		Example: "probe hooks --model zoo/checkpoints/gated_headwise",
		Args:    noArgs("probe hooks lists every hook point, or with --model the points of that model"),
	},
	"inspect": {
		Use:     "inspect <dir|org/name> [--revision R] [--json]",
		Short:   "architecture, shapes, dtypes, parameter count and gate type of a checkpoint (no weights read); a folder of checkpoints is listed",
		Example: "probe inspect zoo/checkpoints/gated_headwise",
		Args:    cobra.ArbitraryArgs,
	},
	"massive": {
		Use:     "massive --model <dir> (--ids <file> | --text <file>) --lengths 1k [--top-k 10] [--intervene zero,mean] [--shard i/n] --out <dir>",
		Short:   "Sun et al.'s massive activations per layer and the perplexity change when they are zeroed or mean-replaced",
		Example: "probe massive --model zoo/checkpoints/gated_headwise --text README.md --lengths 256 --out /tmp/massive",
	},
	"merge": {
		Use:     "merge <shard-dir|diag-csv> ... --out <dir|file.csv> [--force]",
		Short:   "combine the shards of a sweep, diag, gdn, sinks, massive, experts, retrieval or ppl run into the tables of an unsharded run",
		Example: "probe merge /tmp/shard0 /tmp/shard1 --out /tmp/sweep",
		Args:    cobra.ArbitraryArgs,
	},
	"params": {
		Use:     "params <dir|org/name> [--json]",
		Short:   "learned per-head filter parameters of the families that have them: RFA (μ, ω band, σ², η², γ², τ, ν/d, α, β, regime, ALiBi slope), AFA (a, ω band, σ², η², τ_s, s) and RT (μ, ω band, σ̃², η², γ², τ_θ², ν, β_s)",
		Example: "probe params zoo/checkpoints/rfa_m2_sc",
		Args:    cobra.ArbitraryArgs,
	},
	"ppl": {
		Use:     "ppl --model <dir|org/name>[,...] (--ids <file> | --text <file>) [--lengths 256,...,4096] [--samples N] [--gate learned,one,k,k-matched] [--shard i/n] --out <dir> [--force]",
		Short:   "perplexity vs context length and gate variants (BFT Prediction 3)",
		Example: "probe ppl --model zoo/checkpoints/gated_headwise --text README.md --lengths 128,256 --samples 2 --out /tmp/ppl",
	},
	"report": {
		Use:     "report <results-dir> [--out report.html] [--static]",
		Short:   "HTML report of a finished sweep, ppl, gdn, sinks, massive, retrieval or experts folder; `report attention` draws captured attention maps",
		Example: "probe report /tmp/sweep",
		Args:    cobra.ArbitraryArgs,
	},
	"report attention": {
		Use:     "attention --capture <file.safetensors> --layer L [--heads 0,1] [--gamma 0.25] --out <dir>",
		Short:   "attention maps of one captured layer (blocks.{l}.attn.hook_pattern), downsampled and contrast-stretched",
		Example: "probe report attention --capture cap.safetensors --layer 1 --out /tmp/maps",
	},
	"retrieval": {
		Use:     "retrieval --model <dir> [--segment 64] [--gap 0] [--samples 4] [--steps copied|all] [--shard i/n] --out <dir>",
		Short:   "Wu et al.'s retrieval score per softmax head on a synthetic copy task (argmax attention on the copied token's source)",
		Example: "probe retrieval --model zoo/checkpoints/qwen3_base --segment 64 --gap 128 --out /tmp/retrieval",
	},
	"setup": {
		Use:     "setup [--tgz <echarts-5.6.0.tgz>]",
		Short:   "put echarts.min.js in the user cache (from npm) so that reports made anywhere are interactive",
		Example: "probe setup",
	},
	"sinks": {
		Use:     "sinks --model <dir> (--ids <file> | --text <file>) --lengths 1k,4k [--eps 0.3] [--shard i/n] --out <dir>",
		Short:   "first-token attention and Gu et al.'s sink rate, entropy and largest weight vs T, output-gate statistics per softmax head",
		Example: "probe sinks --model zoo/checkpoints/gated_headwise --text README.md --lengths 128,256 --eps 0.1,0.3 --out /tmp/sinks",
	},
	"summarize": {
		Use:     "summarize <dir> [--json] [--last-layers N --ddof 0|1 ...]",
		Short:   "Figs. 2–4 of a sweep folder beside the paper's numbers, optionally re-aggregated",
		Example: "probe summarize /tmp/sweep --last-layers 2",
		Args:    cobra.ArbitraryArgs,
	},
	"sweep": {
		Use:     "sweep --model <dir|org/name> (--text <file> | --ids <file>) --lengths 1k,2k,4k [--samples 5] --out <dir> [--force]",
		Short:   "BFT App. I diagnostic sweep: filter diagnostics over context lengths and samples, tables and Figs. 2–4",
		Example: "probe sweep --model zoo/checkpoints/gated_headwise --text README.md --lengths 128,256 --samples 2 --out /tmp/sweep",
	},
	"tokenize": {
		Use:     "tokenize (--model <dir|org/name> | --tokenizer <tokenizer.json>) --text <file|-> [--tokens] [--no-special-tokens]",
		Short:   "token ids (or --tokens: token strings) of a text as a JSON list: the file probe capture --ids (and every --ids) reads",
		Example: "echo 'The jury said' | probe tokenize --model zoo/checkpoints/gated_headwise --text - --tokens",
		Args:    noArgs("the text is given with --text <file>, or --text - for standard input"),
	},
	"version": {
		Use:     "version [--json]",
		Short:   "module version, VCS revision and whether the tree was modified, from the build information",
		Example: "probe version",
	},
}
