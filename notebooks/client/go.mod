module github.com/filterlens/probe/notebooks/client

go 1.19
