package limiter

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// The span attributes of a decision. Never an API key or a store key (they
// hold tenant IDs); the tenant ID only with Config.TraceTenants.
const (
	attrPolicy     = attribute.Key("fairgate.policy")
	attrClass      = attribute.Key("fairgate.class")
	attrPlan       = attribute.Key("fairgate.plan")
	attrOutcome    = attribute.Key("fairgate.outcome")
	attrAllowed    = attribute.Key("fairgate.allowed")
	attrLayers     = attribute.Key("fairgate.layers")
	attrStoreMs    = attribute.Key("fairgate.store.latency_ms")
	attrRetryMs    = attribute.Key("fairgate.retry_after_ms")
	attrTenant     = attribute.Key("fairgate.tenant")
	attrChecks     = attribute.Key("fairgate.store.checks")
	attrStoreAllow = attribute.Key("fairgate.store.allowed")
)

// endDecision records d on span and ends it.
func (l *Limiter) endDecision(span trace.Span, c *call, d *Decision) {
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attrOutcome.String(string(d.Reason)), attrAllowed.Bool(d.Allowed),
			attrStoreMs.Float64(float64(c.storeTime.Microseconds()) / 1000),
		}
		if d.Policy != "" {
			attrs = append(attrs, attrPolicy.String(d.Policy))
		}
		if !c.direct {
			attrs = append(attrs, attrClass.String(d.Resolution.Class), attrPlan.String(d.Resolution.Plan), attrLayers.Int(len(d.Resolution.Layers)))
			if l.traceTenants && d.Resolution.Tenant != "" {
				attrs = append(attrs, attrTenant.String(d.Resolution.Tenant))
			}
		} else {
			attrs = append(attrs, attrLayers.Int(len(c.checks)))
		}
		if d.RetryAfter > 0 {
			attrs = append(attrs, attrRetryMs.Int64(algo.CeilMillis(d.RetryAfter)))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// storeSpan starts the child span of one store call when tracing is on
// and the decision is recorded; end records the call's outcome and ends it.
func (l *Limiter) storeSpan(ctx context.Context, checks []store.Check) (context.Context, func(res *store.Result, err error)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func(*store.Result, error) {}
	}
	ctx, span := l.tracer.Start(ctx, "fairgate.store.take", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrChecks.Int(len(checks))))
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
func (l *Limiter) observeStore(ctx context.Context, secs float64) {
	if l.tracer != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			if eo, ok := l.m.storeSeconds.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(secs, prometheus.Labels{"trace_id": sc.TraceID().String()})
				return
			}
		}
	}
	l.m.storeSeconds.Observe(secs)
}
