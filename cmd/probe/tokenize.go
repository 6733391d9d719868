package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// TokenizeOptions are the options of probe tokenize.
type TokenizeOptions struct {
	Stdout    io.Writer
	Model     modelFlag
	Tokenizer string // a tokenizer.json (instead of Model)
	Text      string // the text file; - reads standard input
	NoSpecial bool   // without the post-processor's special tokens
	Tokens    bool   // print the token strings instead of the ids
}

// NewCmdTokenize builds probe tokenize; runF (nil: runTokenize) runs it.
func NewCmdTokenize(runF func(*TokenizeOptions) error) *cobra.Command {
	opts := &TokenizeOptions{}
	cmd := &cobra.Command{
		Use:     "tokenize (--model <dir|org/name> | --tokenizer <tokenizer.json>) --text <file|-> [--tokens] [--no-special-tokens]",
		Short:   "token ids (or --tokens: token strings) of a text as a JSON list: the file probe capture --ids (and every --ids) reads",
		Example: "echo 'The jury said' | probe tokenize --model zoo/checkpoints/gated_headwise --text - --tokens",
		Args:    noArgs("the text is given with --text <file>, or --text - for standard input"),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			return orDefault(runF, runTokenize)(opts)
		},
	}
	f := cmd.Flags()
	opts.Model.registerModelRef(f, "checkpoint whose tokenizer.json to use")
	f.StringVar(&opts.Tokenizer, "tokenizer", "", "tokenizer.json file (instead of --model)")
	f.StringVar(&opts.Text, "text", "", "text file to tokenize; - reads standard input")
	f.BoolVar(&opts.NoSpecial, "no-special-tokens", false, "do not add the post-processor's special tokens")
	f.BoolVar(&opts.Tokens, "tokens", false, "print the token strings (a JSON list parallel to the ids) instead of the ids")
	markExactlyOne(cmd, "model", "tokenizer")
	markRequired(cmd, "text", "a file, or - for standard input")
	return cmd
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
