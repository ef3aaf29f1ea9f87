package limiter

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/algo"
)

// The span attributes of a decision (the store call's are package
// guard's). Never an API key or a store key (they hold tenant IDs); the
// tenant ID only with Config.TraceTenants.
const (
	attrPolicy  = attribute.Key("fairgate.policy")
	attrClass   = attribute.Key("fairgate.class")
	attrPlan    = attribute.Key("fairgate.plan")
	attrOutcome = attribute.Key("fairgate.outcome")
	attrAllowed = attribute.Key("fairgate.allowed")
	attrLayers  = attribute.Key("fairgate.layers")
	attrStoreMs = attribute.Key("fairgate.store.latency_ms")
	attrRetryMs = attribute.Key("fairgate.retry_after_ms")
	attrTenant  = attribute.Key("fairgate.tenant")
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
		attrs = append(attrs, attrClass.String(d.Resolution.Class), attrPlan.String(d.Resolution.Plan), attrLayers.Int(len(d.Resolution.Layers)))
		if l.traceTenants && d.Resolution.Tenant != "" {
			attrs = append(attrs, attrTenant.String(d.Resolution.Tenant))
		}
		if d.RetryAfter > 0 {
			attrs = append(attrs, attrRetryMs.Int64(algo.CeilMillis(d.RetryAfter)))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}
