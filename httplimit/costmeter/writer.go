package costmeter

import (
	"errors"
	"net/http"

	"github.com/fairgate/fairgate/policy"
)

// Writer is an http.ResponseWriter that measures what passes through it
// (see [Meter]) and remembers how the answer went: its status and the
// first error writing it to the client. Every Write and flush goes to the
// writer it wraps first, unchanged; it unwraps to that writer, so that
// http.ResponseController reaches the connection's flushes, deadlines and
// hijacking, and it is an http.Flusher itself.
type Writer struct {
	w      http.ResponseWriter
	meter  Meter
	status int
	err    error
	ended  bool
	cost   int64
	found  bool
}

// NewWriter returns a Writer on w measuring by m.
func NewWriter(w http.ResponseWriter, m policy.Measure) *Writer {
	return &Writer{w: w, meter: Meter{m: m}}
}

// Header returns the wrapped writer's header map.
func (w *Writer) Header() http.Header { return w.w.Header() }

// WriteHeader sends the status: a final one (not 1xx, bar 101) starts
// the meter with the header as it is now.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.start(code)
	}
	w.w.WriteHeader(code)
}

// start records the answer's status and starts the meter.
func (w *Writer) start(code int) {
	w.status = code
	w.meter.Start(w.w.Header())
}

// Write sends p, then measures what was sent of it.
func (w *Writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.start(http.StatusOK)
	}
	n, err := w.w.Write(p)
	w.meter.Write(p[:n])
	w.failed(err)
	return n, err
}

// FlushError flushes the wrapped writer through http.ResponseController:
// the error is its (http.ErrNotSupported when it cannot flush).
func (w *Writer) FlushError() error {
	if w.status == 0 {
		w.start(http.StatusOK)
	}
	err := http.NewResponseController(w.w).Flush()
	if !errors.Is(err, http.ErrNotSupported) {
		w.failed(err)
	}
	return err
}

// Flush is FlushError without its error, for http.Flusher.
func (w *Writer) Flush() { _ = w.FlushError() }

// failed remembers err, the first error sending the answer; an answer
// that may have no body (HEAD, 204, 304) or a hijacked connection is no
// failure to send.
func (w *Writer) failed(err error) {
	if err != nil && w.err == nil && !errors.Is(err, http.ErrBodyNotAllowed) && !errors.Is(err, http.ErrHijacked) {
		w.err = err
	}
}

// Unwrap returns the writer w wraps.
func (w *Writer) Unwrap() http.ResponseWriter { return w.w }

// Status returns the answer's status: 0 while none has been sent (a
// handler that returns without writing anything sends 200).
func (w *Writer) Status() int { return w.status }

// Err returns the first error sending the answer to the client (it went
// away, or the connection failed), or nil.
func (w *Writer) Err() error { return w.err }

// Cost returns the answer's cost as [Meter.End] reads it; ok is false
// when the answer did not hold one. Call it once the answer has ended
// (the handler returned): later calls return the same.
func (w *Writer) Cost() (cost int64, ok bool) {
	if !w.ended {
		w.ended = true
		w.cost, w.found = w.meter.End(w.w.Header())
	}
	return w.cost, w.found
}
