package dash_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fairgate/fairgate/internal/app"
	"github.com/fairgate/fairgate/internal/dash"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/limiter"
)

// Tests stop `fairgate serve` at once; the drain test asks for its own.
func init() { os.Setenv("FAIRGATE_DRAIN", "0") }

// browser returns a headless Chromium context (Debian's chromium; make
// test installs it where it can).
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	testenv.External(t, "chromium")
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no chromium on PATH: run `make test` (it installs Debian's chromium with apt-get) or apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel3)
	// Start the browser, then listen to the console before any page loads.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	var mu sync.Mutex
	var problems []string
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(problems) }
}

// serve runs `fairgate serve` on the embedded config and memory store.
func serve(t *testing.T, token string) string {
	t.Helper()
	c, err := app.ParseServe([]string{"--listen", "127.0.0.1:0"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.AdminToken = token
	c.AdminListen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, c, discard(), func(a string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return ""
}

// traffic sends n /v1/check decisions for tenant.
func traffic(t *testing.T, base, tenant string, n int) {
	t.Helper()
	for range n {
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"tenant":"`+tenant+`","route":"GET /v1/search"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// TestDashboardInBrowser loads the dashboard in headless Chromium: the page
// loads without console errors, the chart draws, and the numbers change
// once traffic is sent; with no token set, the limited list says tenant
// IDs need one instead of showing the noisy tenant
// (TestDashboardAsksForToken shows it with the token). It saves a
// screenshot.
func TestDashboardInBrowser(t *testing.T) {
	base := serve(t, "")
	ctx, problems := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("chart")),
		chromedp.Sleep(1500*time.Millisecond),
	); err != nil {
		t.Fatal(err)
	}
	before, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("rate")))
	if err != nil {
		t.Fatal(err)
	}
	// A noisy tenant well over its limit, and a quiet one, for a few
	// seconds, while the page polls.
	stop := time.Now().Add(3 * time.Second)
	for time.Now().Before(stop) {
		traffic(t, base, "noisy-tenant", 40)
		traffic(t, base, "quiet", 2)
	}
	var rate, top, paths string
	deadline := time.Now().Add(10 * time.Second)
	for {
		rate, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("rate")))
		if err == nil {
			top, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("top")))
		}
		if err == nil {
			paths, err = chromedp.Run(ctx, chromedp.Evaluate[string](`String(document.querySelectorAll("#chart path.series").length)`))
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(top, "noisy-tenant") {
			t.Fatalf("with no token set the page shows a tenant ID: %q", top)
		}
		if strings.Contains(top, "shown only with a token") && paths != "0" && rate != before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard did not change: rate %q (was %q), top %q, %s chart paths", rate, before, top, paths)
		}
		time.Sleep(300 * time.Millisecond)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(os.TempDir(), "fairgate-dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes); rate %s, top limited %q", shot, len(png), rate, top)
	// On a phone's width nothing sticks out sideways.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Sleep(1200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	if err != nil || overflow {
		t.Fatalf("the page is wider than a phone's screen (%v)", err)
	}
	if png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(filepath.Join(os.TempDir(), "fairgate-dashboard-phone.png"), png, 0o644)
	}
	if p := problems(); len(p) > 0 {
		t.Fatalf("the page logged errors: %v", p)
	}
}

// TestDashboardAsksForToken: with the admin token set the page asks for
// it, and shows the data once given, the limited tenants included.
func TestDashboardAsksForToken(t *testing.T) {
	const token = "admin-token-for-the-dashboard-1"
	base := serve(t, token)
	ctx, problems := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("login")),
	); err != nil {
		t.Fatal(err)
	}
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`getComputedStyle(document.getElementById("main")).display === "none"`))
	if err != nil || !hidden {
		t.Fatalf("the data was shown before the token was given (%v)", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS("#loginform button")),
		chromedp.WaitNotVisible(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("chart")),
	); err != nil {
		t.Fatal(err)
	}
	traffic(t, base, "noisy-tenant", 200)
	for deadline := time.Now().Add(10 * time.Second); ; {
		top, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("top")))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(top, "noisy-tenant") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the token the page does not show the limited tenant: %q", top)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The failed fetch (401) before the login is expected; nothing else.
	for _, p := range problems() {
		if !strings.Contains(p, "401") {
			t.Fatalf("the page logged errors: %v", problems())
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// upstreamSource reads an upstream capacity gate and nothing else.
type upstreamSource struct{ u dash.Upstream }

func (s upstreamSource) Read() dash.Reading { u := s.u; return dash.Reading{Upstream: &u} }

// TestDashboardUpstreamCard: with an upstream capacity gate, the page
// shows its card with the limit, the waiting requests and the classes in
// flight; without one the card stays hidden (the other browser tests).
func TestDashboardUpstreamCard(t *testing.T) {
	d := dash.New(upstreamSource{dash.Upstream{Limit: 17, Waiting: 4, InFlight: map[string]float64{"export": 9}}}, "")
	d.Sample(time.Now())
	ts := httptest.NewServer(d)
	defer ts.Close()
	ctx, problems := browser(t)
	var got string
	deadline := time.Now().Add(10 * time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	for {
		var err error
		got, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("upstreamcard").hidden ? "hidden" : document.getElementById("upstreamcard").innerText`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, "17") && strings.Contains(got, "export") && strings.Contains(got, "9 in flight") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream card shows %q, want limit 17, 4 waiting and export's 9 in flight", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if p := problems(); len(p) > 0 {
		t.Fatalf("the page logged errors: %v", p)
	}
}

// budgetSource has one budget for every tenant: 200,000 tokens a minute,
// 14,000 of its burst left, full in 1.8 s; and acme limited.
type budgetSource struct{}

func (budgetSource) Read() dash.Reading { return dash.Reading{} }

func (budgetSource) Effective(_ context.Context, tenant string) (limiter.TenantLimits, error) {
	return limiter.TenantLimits{Tenant: tenant, Plan: "pro", Layers: []limiter.LayerState{
		{Policy: "pro.tenant.1m", Limit: 200_000, Burst: 20_000, Period: time.Minute, Remaining: 14_000, ResetAfter: 1800 * time.Millisecond, Unit: "tokens"},
		{Policy: "pro.read.1m", Class: "read", Limit: 600, Burst: 60, Period: time.Minute, Remaining: 60, Unit: "requests"},
	}}, nil
}

// TestDashboardTenantBudget: with a token, a limited tenant picked from
// the list shows its budget, each layer's limit and remaining in its unit
// (tokens beside requests) and when it is full again. It saves a
// screenshot.
func TestDashboardTenantBudget(t *testing.T) {
	const token = "admin-token-for-the-dashboard-1"
	d := dash.New(budgetSource{}, token)
	d.Limited("acme")
	d.Sample(time.Now())
	ts := httptest.NewServer(d)
	defer ts.Close()
	ctx, problems := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS("#loginform button")),
		chromedp.WaitVisible(chromedp.CSS("#top td.pick")),
		chromedp.Click(chromedp.CSS("#top td.pick")),
	); err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		got, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("budgetcard")))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, "acme on plan pro") && strings.Contains(got, "200,000 tokens / 1 min (burst 20,000)") &&
			strings.Contains(got, "14,000 tokens") && strings.Contains(got, "2 s") && strings.Contains(got, "60 requests") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the budget card shows %q, want acme's layers in tokens and requests", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(filepath.Join(os.TempDir(), "fairgate-dashboard-budget.png"), png, 0o644)
	}
	// The failed fetch (401) before the login is expected; nothing else.
	for _, p := range problems() {
		if !strings.Contains(p, "401") {
			t.Fatalf("the page logged errors: %v", problems())
		}
	}
}
