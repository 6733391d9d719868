package explore

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestLoad sends 200 concurrent API requests (grid, series at several
// zooms, tokens, rows of a few queries, so that row passes queue) to a
// loopback server: every answer must be 200 within 30 s, and the heap
// after the burst must stay within 64 MiB of the heap before it.
func TestLoad(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{MaxQueue: 64})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	paths := func(i int) string {
		switch i % 5 {
		case 0:
			return fmt.Sprintf("/api/grid?T=%d&metric=neff", []int{24, 40}[i%2])
		case 1:
			return fmt.Sprintf("/api/series?layer=%d&head=%d&from=%d&to=40&buckets=%d", i%3, i%4, i%30, 1+i%50)
		case 2:
			return fmt.Sprintf("/api/tokens?from=%d&to=%d", i%20, 20+i%20)
		case 3:
			return fmt.Sprintf("/api/row?layer=%d&head=%d&query=%d", i%3, i%4, 30+i%7)
		}
		return "/api/info"
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, 200)
	for i := range 200 {
		wg.Go(func() {
			resp, err := client.Get(ts.URL + paths(i))
			if err != nil {
				errs <- fmt.Sprintf("%s: %v", paths(i), err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Sprintf("%s: %d %.200s", paths(i), resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	elapsed := time.Since(start)
	if elapsed > 30*time.Second {
		t.Errorf("200 requests took %v", elapsed)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("200 concurrent requests in %v; heap %d → %d KiB", elapsed, before.HeapAlloc>>10, after.HeapAlloc>>10)
	if after.HeapAlloc > before.HeapAlloc+64<<20 {
		t.Errorf("heap grew from %d to %d KiB", before.HeapAlloc>>10, after.HeapAlloc>>10)
	}
}

// TestStatusWhileARowRuns: /api/status names the pass under way and the
// queue while a row is computed, and nothing once it is done.
func TestStatusWhileARowRuns(t *testing.T) {
	sw := gated(t)
	s, ts := newTestServer(t, sw.dir, Options{})
	s.rows.sem <- struct{}{} // hold the model: the row waits in the queue
	done := make(chan int)
	go func() {
		code, _ := get(t, ts, "/api/row?T=24&layer=1&head=2&query=17", nil)
		done <- code
	}()
	var st RowStatus
	for range 200 {
		get(t, ts, "/api/status", &st)
		if st.Waiting == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st.Waiting != 1 || st.Running != nil {
		t.Errorf("while queued: %+v", st)
	}
	<-s.rows.sem
	if code := <-done; code != 200 {
		t.Fatalf("row: %d", code)
	}
	get(t, ts, "/api/status", &st)
	if st.Waiting != 0 || st.Running != nil {
		t.Errorf("after: %+v", st)
	}
}
