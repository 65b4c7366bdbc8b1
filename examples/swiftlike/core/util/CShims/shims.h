// shims.h: a workspace C module (its module map is an action input, inside the root).
typedef struct CShimsPoint { long x; long y; } CShimsPoint;
static inline long CShimsSum(CShimsPoint p) { return p.x + p.y; }
