package tokenizer

// Byte-level alphabet (GPT-2's bytes_to_unicode).
//
// Byte-level BPE never sees raw bytes: every byte of the UTF-8 text is first
// mapped to one printable rune, so that the vocabulary can be stored as text.
// The printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' map to the rune with the
// same value; the 68 others (controls, space, DEL, NBSP, soft hyphen, ...)
// map, in increasing byte order, to U+0100, U+0101, ... U+0143. This is why
// a space shows up as 'Ġ' (U+0120) and a newline as 'Ċ' (U+010A) in
// vocabularies.

// byteLevelMaxRune is the largest rune of the byte-level alphabet.
const byteLevelMaxRune = 0x143

var (
	// byteToRune maps a byte to its rune in the byte-level alphabet.
	byteToRune [256]rune
	// byteToString is byteToRune as UTF-8 strings, for fast appending.
	byteToString [256]string
	// runeToByte maps a rune of the alphabet back to its byte; -1 elsewhere.
	runeToByte [byteLevelMaxRune + 1]int16
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		r := rune(b)
		if !printable {
			r = next
			next++
		}
		byteToRune[b] = r
		byteToString[b] = string(r)
		runeToByte[r] = int16(b)
	}
}

// byteLevelEncode maps every byte of s to its rune of the byte-level alphabet.
func byteLevelEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		n += len(byteToString[s[i]])
	}
	buf := make([]byte, 0, n)
	for i := 0; i < len(s); i++ {
		buf = append(buf, byteToString[s[i]]...)
	}
	return string(buf)
}

// byteLevelDecodeToken appends the bytes that token stands for to dst. As in
// Hugging Face's ByteLevel decoder, a token holding any rune outside the
// alphabet (an added token such as "<think>" is inside it; one with CJK
// characters is not) is copied as its own UTF-8 bytes instead.
func byteLevelDecodeToken(dst []byte, token string) []byte {
	start := len(dst)
	for _, r := range token {
		if r < 0 || r > byteLevelMaxRune || runeToByte[r] < 0 {
			return append(dst[:start], token...)
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst
}

// gpt2Pattern is the pre-tokenization regex of GPT-2, used by the ByteLevel
// pre-tokenizer when its use_regex option is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
