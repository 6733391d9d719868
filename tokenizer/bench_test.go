package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

// benchText builds about n bytes of varied text: English prose with numbers
// and punctuation, code, whitespace runs, and some non-Latin scripts.
func benchText(n int) string {
	words := []string{
		"the", "lighthouse", "keeper", "counted", "ships", "during", "winter", "storm",
		"Nobody", "expected", "bakery", "Maple", "Street", "midnight", "don't", "I'll",
		"café", "crêpes", "naïve", "Zürich", "Привет", "мир", "今天", "天气", "東京",
		"func", "return", "x := y + 1", "if err != nil {", "}", "(", ")", "!!", "...",
		"12345", "3.14159", "1,024", "2024-06-01", "https://example.com/a?b=c", "🍕", "👍🏽",
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		w := words[(i*7+i/13)%len(words)]
		b.WriteString(w)
		switch {
		case i%97 == 96:
			b.WriteString("\n\n")
		case i%41 == 40:
			b.WriteString("\n\t")
		case i%29 == 28:
			b.WriteString("    ")
		case i%11 == 10:
			b.WriteString(", ")
		case i%17 == 16:
			b.WriteString(". ")
		default:
			b.WriteString(" ")
		}
		if i%5 == 0 {
			fmt.Fprintf(&b, "%d ", i*37)
		}
	}
	return b.String()
}

func benchmarkEncode(b *testing.B, folder string) {
	tok, _ := loadGolden(b, folder)
	text := benchText(300 << 10)
	b.SetBytes(int64(len(text)))
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		if _, err := tok.Encode(text, false); err != nil {
			b.Fatal(err)
		}
		n++
	}
	// On a shared machine wall time is noisy; CPU time (all threads of the
	// process, GC included) is a steadier measure.
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(n*len(text))/1e6/cpu.Seconds(), "MB/cpu-s")
	}
}

// BenchmarkEncodeGPT2 encodes about 300 KB of generated text with GPT-2.
func BenchmarkEncodeGPT2(b *testing.B) { benchmarkEncode(b, "gpt2") }

// BenchmarkEncodeQwen3 is the same with Qwen3 (Split regex + NFC).
func BenchmarkEncodeQwen3(b *testing.B) { benchmarkEncode(b, "qwen3") }

// BenchmarkEncodeGPT2Cold is BenchmarkEncodeGPT2 with the BPE word cache
// emptied before every run, so that every word is merged again.
func BenchmarkEncodeGPT2Cold(b *testing.B) {
	tok, _ := loadGolden(b, "gpt2")
	text := benchText(300 << 10)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.model.clearCache()
		if _, err := tok.Encode(text, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeMistral is the same with Mistral-7B's SentencePiece-style
// BPE (Prepend and Replace normalizers, no pre-tokenizer, byte fallback).
func BenchmarkEncodeMistral(b *testing.B) { benchmarkEncode(b, "mistral_sp") }

// BenchmarkEncodeGemma3 is the same with Gemma 3 (Replace normalizer, Split
// on spaces, byte fallback, 262k vocabulary).
func BenchmarkEncodeGemma3(b *testing.B) { benchmarkEncode(b, "gemma3") }

// BenchmarkEncodeGPTOSS is the same with gpt-oss (o200k Split regex +
// ByteLevel).
func BenchmarkEncodeGPTOSS(b *testing.B) { benchmarkEncode(b, "gptoss") }

// BenchmarkEncodeDeepSeekV3 is the same with DeepSeek-V3 (three Split
// regexes + ByteLevel).
func BenchmarkEncodeDeepSeekV3(b *testing.B) { benchmarkEncode(b, "deepseek_v3") }
