from suites.ast_lock import install

install()
