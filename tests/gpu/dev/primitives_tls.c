__thread unsigned long tls_counter;
__attribute__((noinline)) unsigned long tls_bump(void) { return ++tls_counter; }
