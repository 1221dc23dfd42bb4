# pydble developer entry points. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON      ?= python3
VENV        ?= .venv
CONFIG      ?= conf/pydble.toml
TEST_TIMEOUT ?= 300
PYTEST_ARGS ?=
# Debian packages the tests and tools need (mariadb-server: mariadbd for the test harness;
# python3-venv: `python3 -m venv` on Debian; libmariadb-dev + pkg-config: building mysqlclient;
# default-jdk-headless: javac for the plain-JDBC compatibility test, java for Spark;
# docker-compose: `docker-compose config` validates docker/compose.yml, no Docker engine needed;
# openssl: `make cert` and the TLS tests; nodejs (+ npm, separate on stock Debian): the mysql2 test).
APT_PACKAGES := zookeeper libmariadb-java sysbench mariadb-client mariadb-server python3-venv \
                libmariadb-dev pkg-config default-jdk-headless docker-compose openssl nodejs
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
MARIADB_PING := mariadb-admin --host=127.0.0.1 --port=3306 --user=root --connect-timeout=2 ping

.PHONY: deps apt venv system-mariadb cert run test clean distclean

## deps: idempotent machine set-up (apt packages, .venv, the system MariaDB on 127.0.0.1:3306)
deps: apt venv system-mariadb

apt:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  case "$$(dpkg -s "$$p" 2>/dev/null || true)" in \
	    *"Status: install ok installed"*) ;; \
	    *) missing="$$missing $$p" ;; \
	  esac; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  $(SUDO) apt-get update -qq; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi; \
	if ! command -v npm >/dev/null; then \
	  echo "apt: installing npm"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; \
	fi

venv: $(VENV)/.stamp

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when pyproject.toml changes (the stamp is older than it).
$(VENV)/.stamp: pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[test,spark]'
	touch $@

system-mariadb:
	@if ! $(MARIADB_PING) >/dev/null 2>&1; then \
	  echo "system MariaDB not answering on 127.0.0.1:3306, starting it"; \
	  $(SUDO) install -d -o mysql -g mysql /run/mysqld 2>/dev/null || $(SUDO) mkdir -p /run/mysqld; \
	  $(SUDO) start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd; \
	  for i in $$(seq 60); do $(MARIADB_PING) >/dev/null 2>&1 && break; sleep 0.5; done; \
	  $(MARIADB_PING) >/dev/null 2>&1 || { echo "system MariaDB did not come up within 30 s" >&2; exit 1; }; \
	fi

## cert: a self-signed certificate and key for TLS on the client port (conf/pydble.toml names them)
cert: conf/server-cert.pem

conf/server-cert.pem:
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=pydble" \
	  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
	  -keyout conf/server-key.pem -out conf/server-cert.pem 2>/dev/null
	chmod 600 conf/server-key.pem

## run: create the shard databases, then run one proxy with conf/pydble.toml in the foreground
run: deps cert
	$(VENV)/bin/pydble init-db --config $(CONFIG)
	exec $(VENV)/bin/pydble serve --config $(CONFIG)

## test: the suite without slow soak/benchmark tests (CI)
test: deps
	$(VENV)/bin/python -m pytest -m "not slow" -q --timeout=$(TEST_TIMEOUT) $(PYTEST_ARGS)

clean:
	rm -rf .pytest_cache .hypothesis build dist run *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
