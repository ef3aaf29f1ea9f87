package replay

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// Format is an access log format.
type Format string

// The formats Run reads.
const (
	FormatAuto   Format = "auto"   // JSON lines if a line starts with '{', else common
	FormatJSON   Format = "json"   // one JSON object a line
	FormatCommon Format = "common" // common or combined log format
)

// Options configure a replay.
type Options struct {
	// Format of the logs. Zero means FormatAuto.
	Format Format
	// TenantField names the tenant: for JSON, the key (zero means
	// "tenant"); for the common format, "user" (the authenticated user,
	// the default), "ident" or "host".
	TenantField string
	// Progress, if not nil, is called now and then with the bytes read.
	Progress func(read int64)
	// MaxBad bounds the malformed lines listed (all are counted). Zero
	// means 100.
	MaxBad int
	// ReorderWindow is how far back in time a line may be, behind the
	// latest line before it in its file, and still be decided in time
	// order: nginx writes a line when its request ends, so a log is out of
	// order by up to a request's duration. A line further behind is
	// decided where it stands and counted in Report.OutOfOrder. Zero means
	// DefaultReorderWindow; a negative value means none (file order, every
	// line earlier than one before it counted).
	ReorderWindow time.Duration
	// CostField names where each line gives its request's true cost: for
	// JSON lines a key or a dotted path (usage.total_tokens), a number or
	// a string of digits; for the common format "bytes" (the response
	// size) or "last" (the line's last field, where a log format appends a
	// variable). With it, a request of a class with a measured cost is
	// charged its estimate and settled at that cost, as a front that
	// settles does; a line that gives none is counted in
	// Report.Unsettled, its estimate standing. Empty means none: such a
	// request is charged its class's cap, as a front that does not settle.
	CostField string
	// EstimateField names where each line gives its request's estimate,
	// as CostField names its cost, for a class with a measured cost
	// (clamped to 1..cap, as the service clamps it); a line without one
	// is charged the class's default estimate. Only with CostField.
	EstimateField string
}

// DefaultReorderWindow is Options.ReorderWindow's default.
const DefaultReorderWindow = time.Minute

// MaxHeld bounds the lines held per file for reordering: past it, the
// earliest held line is decided, and a line later found to be earlier than
// it is counted as out of order. It keeps memory bounded whatever the
// rate of the log and the window.
const MaxHeld = 1 << 20

// MaxHeldBytes bounds the bytes of the lines held per file for
// reordering, as MaxHeld bounds their count: lines may be up to MaxLine
// long, and a million long ones would otherwise be held.
const MaxHeldBytes = 64 << 20

// maxBatchBytes bounds the bytes of the lines of one batch on its way to
// the decider (a batch goes early when it reaches it): with the channel's
// 8 batches, what is in flight stays within about 300 MiB even of
// MaxLine-long lines.
const maxBatchBytes = 32 << 20

// maxHeldBytes is MaxHeldBytes, lowered by a test.
var maxHeldBytes = MaxHeldBytes

// Line is one parsed request.
type Line struct {
	Time           time.Time
	Tenant, Method string
	Path           string
	IP             netip.Addr
	// Cost is the true cost Options.CostField gave, when CostErr is "".
	Cost int64
	// CostErr says why the line gives no true cost (the field is missing,
	// or not a count from 0 to algo.MaxCount); "" when it gives one, or
	// without a CostField.
	CostErr string
	// Estimate is the estimate Options.EstimateField gave, when
	// HasEstimate.
	Estimate    int64
	HasEstimate bool
}

// Bad is one malformed line: its file, its line number (from 1) and what
// is wrong with it.
type Bad struct {
	File   string `json:"file"`
	Line   int64  `json:"line"`
	Reason string `json:"reason"`
}

// Stat counts one tenant's or one policy's requests and limited ones.
type Stat struct {
	// Requests are the requests decided: a tenant's, or, for a policy,
	// those its layer applies to (every request of its route and plan,
	// whichever layer decided it).
	Requests int64 `json:"requests"`
	// Limited are those rejected: a tenant's, or, for a policy, those it
	// rejected as the tightest layer (a request rejected by another layer
	// is that layer's alone, so a policy's limited ones add up to the
	// total).
	Limited int64 `json:"limited"`
	// ShadowLimited are the admitted requests a shadow layer would have
	// rejected: what a replay of a new shadow policy is for.
	ShadowLimited int64     `json:"shadow_limited"`
	FirstLimited  time.Time `json:"first_limited,omitzero"`
	LastLimited   time.Time `json:"last_limited,omitzero"`
	// Cost is the true cost of the requests settled (Options.CostField):
	// a tenant's, or those charged on the policy's layer, in its class's
	// unit.
	Cost int64 `json:"cost,omitempty"`
	// MaxDebt is the deepest debt a settlement left, in units owed: on
	// the policy's layer, or on any of the tenant's. Zero: none.
	MaxDebt int64 `json:"max_debt,omitempty"`
}

func (s *Stat) limitedAt(t time.Time) {
	s.Limited++
	if s.FirstLimited.IsZero() {
		s.FirstLimited = t
	}
	s.LastLimited = t
}

// Report is a replay's outcome.
type Report struct {
	Lines    int64 `json:"lines"`
	Requests int64 `json:"requests"`
	Limited  int64 `json:"limited"`
	// ShadowLimited are the requests some shadow layer would have
	// rejected.
	ShadowLimited int64 `json:"shadow_limited"`
	Malformed     int64 `json:"malformed"`
	// OutOfOrder are the lines decided out of time order: more than the
	// reorder window (ReorderWindowMs) behind the latest line before them
	// in their file (or, past MaxHeld lines held, behind one decided).
	OutOfOrder int64 `json:"out_of_order"`
	// ReorderWindowMs is the reorder window in milliseconds (0: none).
	ReorderWindowMs int64 `json:"reorder_window_ms"`
	// Files are the logs read, merged by time.
	Files   int              `json:"files"`
	Tenants map[string]*Stat `json:"tenants"`
	// Policies counts, by policy (layer), the requests it took part in,
	// those it limited and those it would have limited in shadow mode.
	Policies map[string]*Stat `json:"policies"`
	Bad      []Bad            `json:"bad,omitempty"`
	// CostField is Options.CostField: where the lines' true costs are
	// read from. Empty: none, and the fields below are zero.
	CostField string `json:"cost_field,omitempty"`
	// Units are the units of the measured classes of the requests settled
	// (cost.unit), sorted.
	Units []string `json:"units,omitempty"`
	// Settled are the requests of a class with a measured cost admitted
	// and settled at their line's cost.
	Settled int64 `json:"settled,omitempty"`
	// Unsettled are those admitted and not settled, their estimate
	// standing: their line gives no cost (see Line.CostErr), or more than
	// the store's bound were settled within 2 minutes of log time.
	// UnsettledLines are the first of them (Options.MaxBad).
	Unsettled      int64 `json:"unsettled,omitempty"`
	UnsettledLines []Bad `json:"unsettled_lines,omitempty"`
	// Unapplied are the units settlements could not charge, a debt being
	// at most one burst, summed over the layers.
	Unapplied int64 `json:"unapplied,omitempty"`
}

// Clock is the virtual clock: the time of the line being decided.
type Clock struct{ us atomic.Int64 }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// NewLimiter returns a limiter with policy on an in-memory store, both on
// clock: what Run decides with.
func NewLimiter(policy policy.Policy, clock *Clock) (*limiter.Limiter, error) {
	return limiter.New(limiter.Config{
		Store:   memstore.New(memstore.Config{Now: clock.Now, MaxKeys: 10_000_000}),
		Policy:  policy,
		Timeout: -1,
		Now:     clock.Now,
	})
}

// Input is one log to read.
type Input struct {
	Name string
	R    io.Reader
}

// batchSize is how many parsed lines go to the decider at once.
const batchSize = 512

// item is a parsed line, with where it is, or a malformed one.
type item struct {
	line Line
	file string
	n    int64
	bad  *Bad
	// at orders items across files: the line's time, or for a malformed
	// line the time of the last line its file gave out.
	at   time.Time
	src  int  // the index of its file
	late bool // decided out of time order
	size int  // the bytes of its line, for the bounds on what is held
}

// before orders items: by time, then file, then line.
func (a *item) before(b *item) bool {
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	if a.src != b.src {
		return a.src < b.src
	}
	return a.n < b.n
}

// Run replays inputs through lim, setting clock to each line's time. The
// files are merged by time, and the lines of each reordered within
// o.ReorderWindow (see Options). Parsing runs beside deciding, on another
// goroutine.
func Run(ctx context.Context, lim *limiter.Limiter, clock *Clock, inputs []Input, o Options) (Report, error) {
	if o.MaxBad == 0 {
		o.MaxBad = 100
	}
	if o.ReorderWindow == 0 {
		o.ReorderWindow = DefaultReorderWindow
	}
	rep := Report{Tenants: map[string]*Stat{}, Policies: map[string]*Stat{}, Files: len(inputs), ReorderWindowMs: max(o.ReorderWindow, 0).Milliseconds(), CostField: o.CostField}
	batches := make(chan []item, 8)
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(batches)
		errc <- parse(ctx, inputs, o, batches)
	}()
	for batch := range batches {
		for _, it := range batch {
			rep.Lines++
			if it.late {
				rep.OutOfOrder++
			}
			if it.bad != nil {
				rep.Malformed++
				if len(rep.Bad) < o.MaxBad {
					rep.Bad = append(rep.Bad, *it.bad)
				}
				continue
			}
			l := &it.line
			clock.Set(l.Time)
			req := policy.Request{Tenant: l.Tenant, Method: l.Method, Path: l.Path, IP: l.IP, Settles: o.CostField != ""}
			if req.Settles && l.HasEstimate {
				// The line's estimate is for a measured class alone: a
				// cost given for another would replace its route's.
				// It is a client's, so it is floored at the class's
				// default as the service floors it (policy.Estimate.From).
				if res, err := lim.Snapshot().Resolve(req, l.Time); err == nil && res.Measured != nil {
					req.Cost, req.HasCost = max(l.Estimate, res.Measured.Estimate.From(nil, nil)), true
				}
			}
			d, err := lim.Decide(ctx, req)
			if err != nil {
				rep.Malformed++
				if len(rep.Bad) < o.MaxBad {
					rep.Bad = append(rep.Bad, Bad{File: it.file, Line: it.n, Reason: fmt.Sprintf("%s %s for tenant %q: %v", l.Method, l.Path, l.Tenant, err)})
				}
				continue
			}
			rep.Requests++
			who := l.Tenant
			if who == "" {
				who = "(anonymous)"
			}
			ts := rep.Tenants[who]
			if ts == nil {
				ts = &Stat{}
				rep.Tenants[who] = ts
			}
			ts.Requests++
			// A policy's requests are those its layer applies to, from the
			// resolution: the decision's own layers are fewer when the near
			// cache answers a rejection from one layer alone (20 logins of
			// one address counted 6 requests of the 1m layer beside the
			// 15m one that rejected them).
			for _, ly := range d.Resolution.Layers {
				rep.policy(ly.Policy).Requests++
			}
			if d.Settlement != nil && req.Settles {
				rep.settle(ctx, lim, &d, &it, ts, o.MaxBad)
			}
			if d.Allowed {
				// An admitted request went to the store with every layer:
				// each shadow layer's answer is known.
				shadowed := false
				for _, ld := range d.Layers {
					if ld.Shadow && !ld.Allowed {
						rep.policy(ld.Policy).ShadowLimited++
						shadowed = true
					}
				}
				if shadowed {
					rep.ShadowLimited++
					ts.ShadowLimited++
				}
			} else {
				rep.Limited++
				ts.limitedAt(l.Time)
				rep.policy(d.Policy).limitedAt(l.Time)
			}
		}
	}
	if err := <-errc; err != nil {
		return rep, err
	}
	return rep, ctx.Err()
}

// settle settles d, the admitted decision of it, a measured-cost request
// (of tenant stat ts), at its line's cost, or counts why not.
func (r *Report) settle(ctx context.Context, lim *limiter.Limiter, d *limiter.Decision, it *item, ts *Stat, maxBad int) {
	l := &it.line
	reason := l.CostErr
	var out limiter.SettleOutcome
	if reason == "" {
		var err error
		if out, err = lim.Settle(ctx, d, l.Cost); err != nil {
			reason = err.Error()
		}
	}
	if reason != "" {
		r.Unsettled++
		if len(r.UnsettledLines) < maxBad {
			r.UnsettledLines = append(r.UnsettledLines, Bad{File: it.file, Line: it.n, Reason: reason})
		}
		return
	}
	r.Settled++
	if u := d.Resolution.Measured.Unit; !slices.Contains(r.Units, u) {
		r.Units = append(r.Units, u)
		slices.Sort(r.Units)
	}
	ts.Cost += l.Cost
	for _, ly := range out.Layers {
		ps := r.policy(ly.Policy)
		ps.Cost += l.Cost
		if ly.Remaining < 0 {
			ps.MaxDebt = max(ps.MaxDebt, -ly.Remaining)
			ts.MaxDebt = max(ts.MaxDebt, -ly.Remaining)
		}
		if out.Delta > 0 {
			r.Unapplied += out.Delta - ly.Applied
		}
	}
}

// policy returns the policy's stat, adding it.
func (r *Report) policy(name string) *Stat {
	ps := r.Policies[name]
	if ps == nil {
		ps = &Stat{}
		r.Policies[name] = ps
	}
	return ps
}

// parse reads every input and sends its lines in batches, merged by
// time: each file's next line in time order (its source), the earliest of
// them first (a k-way merge holding one line of each file, and the lines
// each file holds to reorder them).
func parse(ctx context.Context, inputs []Input, o Options, out chan<- []item) error {
	var read int64
	batch := make([]item, 0, batchSize)
	send := func() bool {
		select {
		case out <- batch:
			batch = make([]item, 0, batchSize)
			return true
		case <-ctx.Done():
			return false
		}
	}
	batchB := 0
	heads := &itemHeap{}
	srcs := make([]*source, len(inputs))
	for i, in := range inputs {
		srcs[i] = &source{in: in, idx: i, br: bufio.NewReaderSize(in.R, 64<<10), o: o, read: &read}
		it, ok, err := srcs[i].next()
		if err != nil {
			return err
		}
		if ok {
			heads.items = append(heads.items, it)
		}
	}
	heap.Init(heads)
	for heads.Len() > 0 {
		it := heads.items[0]
		batch = append(batch, *it)
		batchB += it.size
		next, ok, err := srcs[it.src].next()
		if err != nil {
			return err
		}
		if ok {
			heads.items[0] = next
			heap.Fix(heads, 0)
		} else {
			heap.Pop(heads)
		}
		if len(batch) == batchSize || batchB >= maxBatchBytes {
			batchB = 0
			if !send() {
				return ctx.Err()
			}
			if o.Progress != nil {
				o.Progress(read)
			}
		}
	}
	if len(batch) > 0 {
		send()
	}
	if o.Progress != nil {
		o.Progress(read)
	}
	return nil
}

// source gives one file's lines in time order, as far as its reorder
// window allows: a line is held until a line more than the window later
// has been read (or the file ends, or MaxHeld lines are held), then given
// out earliest first. A line more than the window behind the latest before
// it, or behind one given out already, is given out at once, marked late.
// A malformed line is given out at once.
type source struct {
	in   Input
	idx  int
	br   *bufio.Reader
	o    Options
	read *int64 // bytes read, of all files

	buf     []byte
	n       int64     // lines read
	held    itemHeap  // lines held, earliest first
	heldB   int       // the bytes of held's lines
	ready   []*item   // lines to give out before any held
	latest  time.Time // the latest line read
	lastOut time.Time // the line last given out from held
	eof     bool
}

// next returns the file's next line; ok is false at its end.
func (s *source) next() (it *item, ok bool, err error) {
	for {
		if len(s.ready) > 0 {
			it, s.ready = s.ready[0], s.ready[1:]
			return it, true, nil
		}
		if s.held.Len() > 0 && (s.eof || s.held.Len() > MaxHeld || s.heldB > maxHeldBytes || !s.held.items[0].at.After(s.latest.Add(-max(s.o.ReorderWindow, 0)))) {
			it = heap.Pop(&s.held).(*item)
			s.heldB -= it.size
			s.lastOut = it.at
			return it, true, nil
		}
		if s.eof {
			return nil, false, nil
		}
		if err := s.readOne(); err != nil {
			return nil, false, err
		}
	}
}

// readOne reads and places the file's next line, or notes its end.
func (s *source) readOne() error {
	b, size, rerr := readLine(s.br, s.buf[:0], MaxLine)
	s.buf = b[:0]
	if rerr != nil && size == 0 && len(b) == 0 {
		if rerr == io.EOF {
			s.eof = true
			return nil
		}
		return fmt.Errorf("%s: %w", s.in.Name, rerr)
	}
	s.n++
	*s.read += size + 1
	if rerr == io.EOF {
		s.eof = true
	} else if rerr != nil {
		return fmt.Errorf("%s: %w", s.in.Name, rerr)
	}
	bad := func(reason string) {
		s.ready = append(s.ready, &item{bad: &Bad{File: s.in.Name, Line: s.n, Reason: reason}, file: s.in.Name, n: s.n, at: s.lastOut, src: s.idx})
	}
	if size > MaxLine {
		// One line too long to be a log line is a bad line, not the end of
		// the run.
		bad(fmt.Sprintf("line of %d bytes, over 1 MiB", size))
		return nil
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	l, err := ParseLine(b, s.o)
	if err != nil {
		bad(err.Error())
		return nil
	}
	it := &item{line: l, file: s.in.Name, n: s.n, at: l.Time, src: s.idx, size: int(size)}
	if !s.latest.IsZero() && (s.latest.Sub(l.Time) > max(s.o.ReorderWindow, 0) || l.Time.Before(s.lastOut)) {
		it.late = true
		s.ready = append(s.ready, it)
		return nil
	}
	if l.Time.After(s.latest) {
		s.latest = l.Time
	}
	heap.Push(&s.held, it)
	s.heldB += it.size
	return nil
}

// itemHeap is a min-heap of items (container/heap), earliest first.
type itemHeap struct{ items []*item }

func (h *itemHeap) Len() int           { return len(h.items) }
func (h *itemHeap) Less(i, j int) bool { return h.items[i].before(h.items[j]) }
func (h *itemHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *itemHeap) Push(x any)         { h.items = append(h.items, x.(*item)) }
func (h *itemHeap) Pop() any {
	it := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = nil
	h.items = h.items[:len(h.items)-1]
	return it
}

// MaxLine is the longest log line replay reads; a longer one counts as a
// bad line.
const MaxLine = 1 << 20

// readLine reads one line (without its newline) into buf, keeping at most
// max bytes of it, and returns it with the line's whole length (over max
// for a line that was cut) and the reader's error, if any: io.EOF with a
// line for a last line without a newline.
func readLine(r *bufio.Reader, buf []byte, max int) ([]byte, int64, error) {
	var size int64
	for {
		part, err := r.ReadSlice('\n')
		size += int64(len(part))
		if len(buf) < max {
			buf = append(buf, part[:min(len(part), max-len(buf))]...)
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			return bytes.TrimSuffix(buf, []byte("\n")), size - 1, nil
		default:
			return buf, size, err
		}
	}
}

// jsonLine is a JSON log line.
type jsonLine struct {
	Time   json.RawMessage `json:"time"`
	Tenant string          `json:"tenant"`
	Method string          `json:"method"`
	Path   string          `json:"path"`
	IP     string          `json:"ip"`
}

// ParseLine reads one log line in o's format.
func ParseLine(b []byte, o Options) (Line, error) {
	f := o.Format
	if f == "" || f == FormatAuto {
		f = FormatCommon
		if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
			f = FormatJSON
		}
	}
	switch f {
	case FormatJSON:
		return parseJSON(b, o)
	case FormatCommon:
		return parseCommon(b, o)
	}
	return Line{}, fmt.Errorf("unknown log format %q: want json, common or auto", f)
}

func parseJSON(b []byte, o Options) (Line, error) {
	var l Line
	var j jsonLine
	line := b
	if tenantField := o.TenantField; tenantField != "" && tenantField != "tenant" {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return l, fmt.Errorf("not a JSON object: %v", err)
		}
		t, _ := m[tenantField].(string)
		b2, _ := json.Marshal(map[string]any{"time": m["time"], "tenant": t, "method": m["method"], "path": m["path"], "ip": m["ip"]})
		b = b2
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return l, fmt.Errorf("not a JSON log line: %v", err)
	}
	var err error
	if l.Time, err = parseTime(j.Time); err != nil {
		return l, err
	}
	if j.Method == "" || !strings.HasPrefix(j.Path, "/") {
		return l, errors.New("method and path (starting with /) are required")
	}
	l.Tenant, l.Method, l.Path = j.Tenant, j.Method, j.Path
	if j.IP != "" {
		if l.IP, err = netip.ParseAddr(j.IP); err != nil {
			return l, fmt.Errorf("ip %q: %v", j.IP, err)
		}
	}
	if o.CostField != "" || o.EstimateField != "" {
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			return l, fmt.Errorf("not a JSON object: %v", err)
		}
		l.costs(o, func(field string) (any, string) { return jsonField(m, field), "" })
	}
	return l, nil
}

// jsonField is the value at path (member names joined by '.') in m; nil
// when there is none.
func jsonField(m map[string]any, path string) any {
	var v any = m
	for name := range strings.SplitSeq(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[name]
	}
	return v
}

// costs sets l's cost and estimate from the fields o names, as get reads
// them: a value, or a reason the field cannot be read in this format.
func (l *Line) costs(o Options, get func(field string) (v any, bad string)) {
	if o.CostField != "" {
		v, bad := get(o.CostField)
		if bad == "" {
			l.Cost, bad = Count(v)
		}
		if bad != "" {
			l.CostErr = fmt.Sprintf("cost field %q: %s", o.CostField, bad)
		}
	}
	if o.EstimateField != "" {
		// As the service reads an estimate: one that is not a count is
		// none, and the class's default applies.
		if v, bad := get(o.EstimateField); bad == "" {
			n, bad := Count(v)
			l.Estimate, l.HasEstimate = n, bad == ""
		}
	}
}

// Count reads a count from a log field's value: a JSON number (a
// fraction rounded up) or a string of decimal digits (what nginx writes
// for a variable), from 0 to [algo.MaxCount]. For anything else it gives
// the reason: "missing" (absent, null, "" or "-"), "… is not a count",
// "… is negative", "… is over 1000000000".
func Count(v any) (int64, string) {
	var num string
	switch x := v.(type) {
	case nil:
		return 0, "missing"
	case json.Number:
		num = string(x)
	case float64:
		num = strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		num = strings.TrimSpace(x)
		if num == "" || num == "-" {
			return 0, "missing"
		}
		if digits := strings.TrimPrefix(num, "-"); digits == "" || strings.Trim(digits, "0123456789") != "" {
			return 0, quoteShort(num) + " is not a count"
		}
	default:
		return 0, "a JSON " + jsonKind(v) + " is not a count"
	}
	f, err := strconv.ParseFloat(num, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f):
		return 0, quoteShort(num) + " is not a count"
	case f < 0:
		return 0, quoteShort(num) + " is negative"
	case f > algo.MaxCount:
		return 0, fmt.Sprintf("%s is over %d", quoteShort(num), algo.MaxCount)
	}
	// Within MaxCount, the float is exact for a whole number.
	return int64(math.Ceil(f)), ""
}

// quoteShort is s quoted, cut to 40 bytes: a reason names a log's value
// without copying a long one.
func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strconv.Quote(s)
}

// jsonKind names a decoded JSON value's kind.
func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return "value"
}

// parseTime reads an RFC 3339 string or a number of Unix seconds.
func parseTime(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, errors.New("time is required")
	}
	if raw[0] == '"' {
		var s string
		json.Unmarshal(raw, &s)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return t, fmt.Errorf("time %q: want RFC 3339, such as 2026-12-03T10:00:00Z", s)
		}
		return t, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f < 0 || f > 1e11 {
		return time.Time{}, fmt.Errorf("time %s: want RFC 3339 or Unix seconds", raw)
	}
	// Read as the decimal it is written in, not through the float: in
	// binary 1796292001.05 is 1796292001.049999952….
	whole, frac, hasFrac := strings.Cut(string(raw), ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || strings.ContainsAny(string(raw), "eE") {
		return time.Unix(int64(f), int64((f-float64(int64(f)))*1e9)).UTC(), nil // an exponent: as the float says
	}
	var ns int64
	if hasFrac {
		digits := (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(digits, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("time %s: want RFC 3339 or Unix seconds", raw)
		}
	}
	return time.Unix(sec, ns).UTC(), nil
}

// clfTime is the common log format's time layout.
const clfTime = "02/Jan/2006:15:04:05 -0700"

// parseCommon reads `host ident user [time] "METHOD path proto" status
// bytes` and whatever the combined format adds after.
func parseCommon(b []byte, o Options) (Line, error) {
	tenantField := o.TenantField
	var l Line
	s := string(b)
	fields := make([]string, 0, 3)
	for range 3 {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return l, errors.New("want host ident user [time] \"request\" …")
		}
		fields, s = append(fields, s[:i]), s[i+1:]
	}
	if len(s) == 0 || s[0] != '[' {
		return l, errors.New("no [time] after host, ident and user")
	}
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return l, errors.New("[time] is not closed")
	}
	t, err := time.Parse(clfTime, s[1:end])
	if err != nil {
		return l, fmt.Errorf("time %q: want 10/Oct/2000:13:55:36 -0700", s[1:end])
	}
	s = strings.TrimLeft(s[end+1:], " ")
	if len(s) == 0 || s[0] != '"' {
		return l, errors.New("no \"request\" after the time")
	}
	q := strings.IndexByte(s[1:], '"')
	if q < 0 {
		return l, errors.New("the request is not closed")
	}
	req := strings.Fields(s[1 : q+1])
	if len(req) < 2 || !strings.HasPrefix(req[1], "/") {
		return l, fmt.Errorf("request %q: want METHOD /path PROTOCOL", s[1:q+1])
	}
	l.Time, l.Method, l.Path = t, req[0], req[1]
	if i := strings.IndexByte(l.Path, '?'); i >= 0 {
		l.Path = l.Path[:i]
	}
	var tenant string
	switch tenantField {
	case "", "user":
		tenant = fields[2]
	case "ident":
		tenant = fields[1]
	case "host":
		tenant = fields[0]
	default:
		return l, fmt.Errorf("tenant field %q: want user, ident or host for the common format", tenantField)
	}
	if tenant != "-" {
		l.Tenant = tenant
	}
	l.IP, _ = netip.ParseAddr(fields[0])
	if o.CostField != "" || o.EstimateField != "" {
		after := s[q+2:]
		l.costs(o, func(field string) (any, string) { return commonField(after, field) })
	}
	return l, nil
}

// commonField is the value of field in what follows a common-format
// line's request (`status bytes …`): "bytes", the response size ("-",
// which Apache writes for none, is 0), or "last", the line's last field,
// a quoted one unquoted; nil when the line has no such field.
func commonField(after, field string) (any, string) {
	after = strings.TrimSpace(after)
	switch field {
	case "bytes":
		f := strings.Fields(after)
		if len(f) < 2 {
			return nil, ""
		}
		if f[1] == "-" {
			return "0", ""
		}
		return f[1], ""
	case "last":
		if after == "" {
			return nil, ""
		}
		if strings.HasSuffix(after, `"`) && len(after) > 1 {
			if i := strings.LastIndexByte(after[:len(after)-1], '"'); i >= 0 {
				return after[i+1 : len(after)-1], ""
			}
		}
		return after[strings.LastIndexByte(after, ' ')+1:], ""
	}
	return nil, "want bytes or last for the common format"
}

// TopTenants returns the tenants sorted by limited requests, most first
// (then by name), at most n (0: all).
func (r *Report) TopTenants(n int) []string {
	names := make([]string, 0, len(r.Tenants))
	for k := range r.Tenants {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := r.Tenants[b].Limited - r.Tenants[a].Limited; d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	if n > 0 && len(names) > n {
		names = names[:n]
	}
	return names
}
