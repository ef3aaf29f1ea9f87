package costmeter_test

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/httplimit/costmeter"
	"github.com/fairgate/fairgate/policy"
)

var sseMeasure = policy.Measure{SSE: "usage.total_tokens", Trailer: "X-Usage-Tokens"}

// onlyUnwrap wraps a writer the way other middleware does: no Flush of
// its own, only Unwrap.
type onlyUnwrap struct{ http.ResponseWriter }

func (w onlyUnwrap) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestWriterStreams: each event reaches the client before the handler
// writes the next, whether it flushes through http.Flusher or through
// http.ResponseController across another wrapper; the cost is the last
// event's.
func TestWriterStreams(t *testing.T) {
	for _, how := range []string{"flusher", "controller"} {
		t.Run(how, func(t *testing.T) {
			read := make(chan string)
			costs := make(chan int64, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mw := costmeter.NewWriter(w, sseMeasure)
				var out http.ResponseWriter = mw
				flush := func() { mw.Flush() }
				if how == "controller" {
					out = onlyUnwrap{mw}
					flush = func() {
						if err := http.NewResponseController(out).Flush(); err != nil {
							t.Error(err)
						}
					}
				}
				out.Header().Set("Content-Type", "text/event-stream")
				for i, ev := range []string{`{"usage":null}`, `{"usage":{"total_tokens":5}}`, `{"usage":{"total_tokens":9}}`} {
					io.WriteString(out, "data: "+ev+"\n\n")
					flush()
					// The handler goes on only once the client has the event:
					// nothing waits for the end of the answer.
					if got := <-read; got != "data: "+ev {
						t.Errorf("event %d: the client read %q", i, got)
					}
				}
				n, _ := mw.Cost()
				costs <- n
			}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for range 3 {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				br.ReadString('\n') // the blank line
				read <- strings.TrimSuffix(line, "\n")
			}
			if n := <-costs; n != 9 {
				t.Errorf("cost %d, want 9", n)
			}
		})
	}
}

// TestWriterTrailer: a trailer set after the body, announced or with
// http.TrailerPrefix, reaches the client and gives the cost.
func TestWriterTrailer(t *testing.T) {
	for _, announced := range []bool{true, false} {
		costs := make(chan int64, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mw := costmeter.NewWriter(w, sseMeasure)
			if announced {
				mw.Header().Set("Trailer", "X-Usage-Tokens")
			}
			io.WriteString(mw, "data: {}\n\n")
			mw.Flush() // chunked, so that trailers can follow (httputil.ReverseProxy does the same)
			if announced {
				mw.Header().Set("X-Usage-Tokens", "31")
			} else {
				mw.Header().Set(http.TrailerPrefix+"X-Usage-Tokens", "31")
			}
			n, _ := mw.Cost()
			costs <- n
		}))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		srv.Close()
		if n := <-costs; n != 31 || resp.Trailer.Get("X-Usage-Tokens") != "31" {
			t.Errorf("announced %v: cost %d, the client's trailer %q; want 31 both", announced, n, resp.Trailer.Get("X-Usage-Tokens"))
		}
	}
}

// TestWriterStatus: the status is the final one (1xx pass through), 200
// for a body without one, 0 for no answer; an answer that may have no
// body is no failure to send.
func TestWriterStatus(t *testing.T) {
	w := costmeter.NewWriter(httptest.NewRecorder(), sseMeasure)
	if w.Status() != 0 {
		t.Errorf("before anything: %d", w.Status())
	}
	w.WriteHeader(http.StatusEarlyHints)
	w.WriteHeader(http.StatusTeapot)
	w.WriteHeader(http.StatusOK)
	if w.Status() != http.StatusTeapot {
		t.Errorf("status %d, want 418", w.Status())
	}
	w = costmeter.NewWriter(httptest.NewRecorder(), sseMeasure)
	w.Write([]byte("x"))
	if w.Status() != http.StatusOK {
		t.Errorf("a body without a status: %d, want 200", w.Status())
	}

	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := costmeter.NewWriter(rw, sseMeasure)
		w.WriteHeader(http.StatusNoContent)
		_, err := w.Write([]byte("not allowed"))
		if !errors.Is(err, http.ErrBodyNotAllowed) {
			t.Errorf("write after 204: %v", err)
		}
		errs <- w.Err()
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-errs; err != nil {
		t.Errorf("Err after a 204: %v, want nil", err)
	}
}

// TestWriterClientGone: a client that goes away mid-answer makes a write
// fail, and Err says so.
func TestWriterClientGone(t *testing.T) {
	gone := make(chan struct{})
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := costmeter.NewWriter(rw, sseMeasure)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\n\n")
		w.Flush()
		<-gone
		<-r.Context().Done()
		chunk := []byte("data: " + strings.Repeat("x", 4096) + "\n\n")
		for w.Err() == nil {
			w.Write(chunk)
			w.Flush()
		}
		errs <- w.Err()
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close() // mid-stream: closes the connection
	close(gone)
	if err := <-errs; err == nil {
		t.Error("Err is nil after the client went away")
	}
}
