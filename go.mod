module github.com/fairgate/fairgate

go 1.26.8

require (
	github.com/google/go-cmp v0.7.0
	github.com/redis/rueidis v1.0.80
)

require golang.org/x/sys v0.50.0 // indirect
