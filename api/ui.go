package api

import (
	"embed"
	"io/fs"
	"mime"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// The dashboard: plain HTML, CSS and JavaScript with uPlot (ui/vendor,
// see ui/vendor/README.md), embedded in the binary and served at / of the
// API's listener. The files are public; every number on the page comes
// from /api/v1 with the token the login form keeps in the browser's
// session storage, so the page shows what the token may see and nothing
// else, under the API's limits.
//
//go:embed ui
var uiFiles embed.FS

// uiCSP keeps the page to its own files: no CDN, no inline script.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// mountUI serves the dashboard's files at / and /ui/.
func (s *Server) mountUI() {
	files, _ := fs.Sub(uiFiles, "ui")
	serve := func(c *fiber.Ctx, name string) error {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return s.writeError(c, &Error{Status: 404, Code: CodeNotFound, Message: "no such file"})
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		c.Set(fiber.HeaderContentType, ct)
		c.Set("Content-Security-Policy", uiCSP)
		c.Set("X-Content-Type-Options", "nosniff")
		c.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(name, "vendor/") {
			c.Set(fiber.HeaderCacheControl, "public, max-age=86400")
		} else {
			c.Set(fiber.HeaderCacheControl, "no-cache")
		}
		return c.Send(b)
	}
	s.app.Get("/", func(c *fiber.Ctx) error { return serve(c, "index.html") })
	s.app.Get("/ui/*", func(c *fiber.Ctx) error {
		name := path.Clean(c.Params("*"))
		if name == "." || strings.HasPrefix(name, "..") || strings.HasPrefix(name, "/") {
			return s.writeError(c, &Error{Status: 404, Code: CodeNotFound, Message: "no such file"})
		}
		return serve(c, name)
	})
}
