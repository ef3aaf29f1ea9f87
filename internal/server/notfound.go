package server

import (
	"net/http"
	"strings"

	"github.com/fairgate/fairgate/httplimit/problem"
)

// Where fairgate's other listeners are, for the 404s of paths one
// listener does not serve: the flag that sets each, never its address.
const (
	adminElsewhere = "the admin API is not on this listener: it is on its own, --admin-listen (127.0.0.1:8081 unless set), which serves only when an admin token is set (FAIRGATE_ADMIN_TOKEN or --admin-token-file); send the token there as Authorization: Bearer"
	dashboardOff   = "the dashboard is turned off by dashboard: off in the config; remove that line and restart to serve it"
	mainElsewhere  = "this path is served on the main listener (--listen), not on the internal one"
	notAdmin       = "the admin listener serves /admin/... only: the decision API, /metrics, /readyz and /dashboard are on the main listener (--listen), or with --upstream on the internal one (--internal-listen)"
)

// notFound answers 404 for a path no endpoint of a listener serves, with
// hint's word on where it is served instead ("" for none).
func notFound(hint func(r *http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		detail := "no such endpoint: " + r.Method + " " + r.URL.Path
		if h := hint(r); h != "" {
			detail += "; " + h
		}
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: detail})
	}
}

// elsewhere says where the decision service's listener (or, in proxy
// mode, the internal one) sends a path it does not serve: the admin API's
// paths to the admin listener, the dashboard's to its setting when it is
// off, and, given the public surface pub of proxy mode, the paths pub
// serves to the main listener.
func elsewhere(dashboard bool, pub *http.ServeMux) func(r *http.Request) string {
	return func(r *http.Request) string {
		p := r.URL.Path
		switch {
		case under(p, "/admin"):
			return adminElsewhere
		case !dashboard && under(p, "/dashboard"):
			return dashboardOff
		}
		if pub != nil {
			if _, pattern := pub.Handler(r); pattern != "" && pattern != "/" {
				return mainElsewhere
			}
		}
		return ""
	}
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
