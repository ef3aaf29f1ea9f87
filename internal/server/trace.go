package server

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/internal/tracing"
)

// traced wraps h, when tracing is on, with a server span per request,
// the parent of the decision spans below it (and, through the proxy, of
// the upstream's). The request's W3C traceparent is the span's parent
// only when the caller's trace context is trusted
// (Config.TrustTraceContext); else the span starts a new trace linked to
// the caller's (tracing.Remote). Off, it is h.
func (s *Server) traced(h http.Handler) http.Handler {
	if s.tracer == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, opts := tracing.Remote(r.Context(), propagation.HeaderCarrier(r.Header), s.trustTrace)
		ctx, span := s.tracer.Start(ctx, "fairgate "+r.Method, append(opts, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))...)
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r.WithContext(ctx))
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
	})
}

// injectTrace gives the upstream's request the trace context of the
// proxy's span, so that the upstream's spans are its children: the
// client's traceparent and tracestate are replaced, never left beside
// fairgate's (a new trace has no tracestate). With tracing off the
// client's own pass through untouched.
func (s *Server) injectTrace(out *http.Request) {
	if s.tracer != nil {
		out.Header.Del("Traceparent")
		out.Header.Del("Tracestate")
		tracing.Propagator.Inject(out.Context(), propagation.HeaderCarrier(out.Header))
	}
}
