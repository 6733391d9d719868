package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TokenizeOptions are the options of probe tokenize.
type TokenizeOptions struct {
	cmdIO
	Model     modelFlag
	Tokenizer string // a tokenizer.json (instead of Model)
	Text      string // the text file; - reads standard input
	NoSpecial bool   // without the post-processor's special tokens
	Tokens    bool   // print the token strings instead of the ids
}

// flags declares the flags of probe tokenize into f and their relations.
func (o *TokenizeOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	o.Model.registerModelRef(f, "checkpoint whose tokenizer.json to use")
	f.StringVar(&o.Tokenizer, "tokenizer", "", "tokenizer.json file (instead of --model)")
	f.StringVar(&o.Text, "text", "", "text file to tokenize; - reads standard input")
	f.BoolVar(&o.NoSpecial, "no-special-tokens", false, "do not add the post-processor's special tokens")
	f.BoolVar(&o.Tokens, "tokens", false, "print the token strings (a JSON list parallel to the ids) instead of the ids")
	markExactlyOne(cmd, "model", "tokenizer")
	markRequired(cmd, "text", "a file, or - for standard input")
}

// runTokenize prints the ids (or token strings) of the text as JSON.
func runTokenize(opts *TokenizeOptions) error {
	dir := ""
	if opts.Model.Name != "" {
		var err error
		if dir, _, err = opts.Model.locate(); err != nil {
			return err
		}
	}
	tok, err := loadTokenizer(dir, opts.Tokenizer)
	if err != nil {
		return err
	}
	text, err := readInput(opts.Text)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(string(text), !opts.NoSpecial)
	if err != nil {
		return fmt.Errorf("%s: %w", inputName(opts.Text), err)
	}
	enc := json.NewEncoder(opts.Stdout)
	enc.SetEscapeHTML(false) // "<|endoftext|>", not "\u003c|endoftext|\u003e"
	if opts.Tokens {
		return enc.Encode(tok.Tokens(ids))
	}
	return enc.Encode(ids)
}
