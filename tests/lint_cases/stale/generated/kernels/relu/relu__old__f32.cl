// left over from a removed variant
