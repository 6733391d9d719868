package browser

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWebsocketFrames(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := &wsConn{conn: a, br: newReader(a)}, &wsConn{conn: b, br: newReader(b)}
	defer a.Close()
	defer b.Close()
	for _, n := range []int{0, 10, 125, 126, 300, 65535, 70000} {
		msg := bytes.Repeat([]byte{'x'}, n)
		go func() { ca.WriteText(msg) }()
		got, err := cb.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Errorf("%d-byte message came back as %d bytes", n, len(got))
		}
	}
	// A ping is answered with a pong and skipped; fragments are joined.
	go func() {
		ca.writeFrame(opPing, []byte("hi"))
		ca.writeRaw(false, opText, []byte("ab"))
		ca.writeRaw(true, opContinuation, []byte("cd"))
	}()
	pong := make(chan []byte)
	go func() {
		_, op, p, _ := ca.readFrame()
		if op == opPong {
			pong <- p
		}
	}()
	got, err := cb.ReadMessage()
	if err != nil || string(got) != "abcd" {
		t.Errorf("fragmented message: %q, %v", got, err)
	}
	select {
	case p := <-pong:
		if string(p) != "hi" {
			t.Errorf("pong %q", p)
		}
	case <-time.After(2 * time.Second):
		t.Error("no pong")
	}
}

// TestCheckFindsProblems proves the check fails pages it should fail: an
// external request, console errors, an exception, a blank chart.
func TestCheckFindsProblems(t *testing.T) {
	chromium, err := Find()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "bad.html")
	os.WriteFile(page, []byte(`<!DOCTYPE html><html><body>
<div class="chart" id="blank" style="width:200px;height:100px"></div>
<div class="chart" id="drawn" style="width:200px;height:100px"><canvas id="c" width="200" height="100"></canvas></div>
<img src="http://example.invalid/x.png">
<script>
var g = document.getElementById('c').getContext('2d');
g.fillStyle = '#0072b2'; g.fillRect(10, 10, 120, 60); g.fillStyle = '#d55e00'; g.fillRect(60, 40, 120, 50);
console.error('boom');
undefinedFunction();
</script></body></html>`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Check(ctx, chromium, page)
	if err != nil {
		t.Fatal(err)
	}
	probs := strings.Join(res.Problems(0.02), "\n")
	for _, want := range []string{"external request: http://example.invalid/x.png", "console.error: boom", "undefinedFunction", `chart "blank"`} {
		if !strings.Contains(probs, want) {
			t.Errorf("problems lack %q:\n%s", want, probs)
		}
	}
	if strings.Contains(probs, `chart "drawn"`) {
		t.Errorf("the drawn chart was flagged:\n%s", probs)
	}
	if len(res.Charts) != 2 || res.Charts[1].NonBlank < 0.3 {
		t.Errorf("charts %+v", res.Charts)
	}
}
