package guard

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// The span attributes of a Take and of a store call: never a store key
// (keys hold tenant IDs). The decision's names are package limiter's.
const (
	attrOutcome    = attribute.Key("fairgate.outcome")
	attrAllowed    = attribute.Key("fairgate.allowed")
	attrLayers     = attribute.Key("fairgate.layers")
	attrStoreMs    = attribute.Key("fairgate.store.latency_ms")
	attrRetryMs    = attribute.Key("fairgate.retry_after_ms")
	attrChecks     = attribute.Key("fairgate.store.checks")
	attrStoreAllow = attribute.Key("fairgate.store.allowed")
)

// endTake records a Take's outcome on its span, in the words of a
// decision's span, and ends it.
func endTake(span trace.Span, o Outcome, checks int, took time.Duration, res *store.Result) {
	if span.IsRecording() {
		outcome, allowed, retry := "unavailable_closed", false, UnavailableRetryAfter
		switch o {
		case Decided:
			outcome, allowed, retry = "allowed", res.Allowed, res.RetryAfter()
			if !res.Allowed {
				outcome = "limited"
			}
		case Degraded:
			outcome, allowed, retry = "degraded_open", res.Allowed, 0
		}
		attrs := []attribute.KeyValue{
			attrOutcome.String(outcome), attrAllowed.Bool(allowed),
			attrStoreMs.Float64(float64(took.Microseconds()) / 1000),
			attrLayers.Int(checks),
		}
		if retry > 0 {
			attrs = append(attrs, attrRetryMs.Int64(algo.CeilMillis(retry)))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// storeSpan starts the child span of one store call when tracing is on
// and the caller's span is recorded; end records the call's outcome and
// ends it.
func (g *Guard) storeSpan(ctx context.Context, checks []store.Check) (context.Context, func(res *store.Result, err error)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func(*store.Result, error) {}
	}
	ctx, span := g.tracer.Start(ctx, "fairgate.store.take", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrChecks.Int(len(checks))))
	return ctx, func(res *store.Result, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attrStoreAllow.Bool(res.Allowed))
		}
		span.End()
	}
}

// observeStore records a store call's duration; when the call is traced
// and sampled, with its trace ID as the bucket's exemplar, so that a slow
// bucket leads to a trace that shows why.
func (g *Guard) observeStore(ctx context.Context, secs float64) {
	if g.tracer != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			if eo, ok := g.m.storeSeconds.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(secs, prometheus.Labels{"trace_id": sc.TraceID().String()})
				return
			}
		}
	}
	g.m.storeSeconds.Observe(secs)
}
