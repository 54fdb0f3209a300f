package e2etest

import (
	"context"
	"io"
	"net/http"
	"time"
)

// ScrapeMetrics reads /metrics at addr (a controller's or a machine
// agent's --metrics-addr), within 10 s.
func ScrapeMetrics(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
