/* placeholder replaced by the driver */
int main(void) { return 0; }
